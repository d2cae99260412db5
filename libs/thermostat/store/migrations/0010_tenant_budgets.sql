-- Metering, part 2 (issue 12): per pool tenant, USD per UTC day and month; NULL is no ceiling.
CREATE TABLE tenant_budgets (
    tenant_id    text PRIMARY KEY,
    daily_usd    double precision CHECK (daily_usd >= 0),
    monthly_usd  double precision CHECK (monthly_usd >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
