"""The claims' simulated forms (``mrc-lab experiment NAME --sim``): each module here is named
after its experiment and holds ``SIM``, a :class:`~lab.workloads.experiments.sim.common.SimForm`
that runs the claim in ``mrc-sim``'s whole fabric at the paper's proportions."""
