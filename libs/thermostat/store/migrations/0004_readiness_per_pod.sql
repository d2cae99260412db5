-- Readiness is per pod, not per name: a stale pod and its replacement can both answer /metrics, and GET
-- must serve the readySince of the pod it reports, not whichever was reported last.
ALTER TABLE pod_readiness DROP CONSTRAINT pod_readiness_pkey;
ALTER TABLE pod_readiness ADD PRIMARY KEY (pod_name, pod_id);
