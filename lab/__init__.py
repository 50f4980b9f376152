"""lab: the namespace lab (mrc-lab): multi-plane two-tier Clos, bring-up, faults."""
