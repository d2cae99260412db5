"""RunPod REST v2: the one client of the house (model pods and pool machines) and the shapes it reads."""
