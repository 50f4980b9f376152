"""The fabric: the Clos plan, namespaces, both switch modes, faults, state, status, capture and the prober."""
