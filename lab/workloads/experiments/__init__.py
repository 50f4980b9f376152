"""Every published MRC claim as a one-command experiment (``mrc-lab experiment NAME``).

Each module here holds one experiment: an :class:`~lab.workloads.experiments.registry.Spec` named
``EXPERIMENT`` whose ``run(ctx)`` brings up its lab, runs MRC and the RoCEv2 baseline,
and returns a :class:`~lab.workloads.experiments.base.Result`. ``registry`` finds and runs them;
``report`` turns their JSON into ``results/REPORT.md``. docs/results/experiments.md is the manual.
"""
