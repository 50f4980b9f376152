"""The two engine choices a QP can be made with: the Python twins (:data:`PY_ENGINES`) or a
device's C engines (:class:`CEngines`), each building both engines when the QP connects.
The interfaces they build to are in :mod:`mrcnic.transport.engine`."""

from __future__ import annotations

from mrcnic.transport.engine import EngineHost, RecvEngine, SendEngine
from mrcnic.transport.requester import PySendEngine
from mrcnic.transport.responder import PyRecvEngine
from mrcnic.transport.rx_engine import CRxEngine, RxEngines
from mrcnic.transport.tx_engine import CTxEngine


class PyEngines:
    """The Python twins (``MRC_NIC_ENGINE=py``, the simulator, a bare QueuePair)."""

    name = "py"

    def make(self, qp: EngineHost) -> tuple[SendEngine, RecvEngine]:
        return PySendEngine(qp), PyRecvEngine(qp)


PY_ENGINES = PyEngines()


class CEngines:
    """The C engines of one device (``rx``: its :class:`~mrcnic.transport.rx_engine.RxEngines`).
    A QP the C engines cannot serve gets a Python twin for that side: the C send engine
    sprays from bags only (``EvConfig.spray="bag"``), and a device's C receive dispatch
    serves at most ``RxEngines.MAX_QPS`` QPs."""

    name = "c"

    def __init__(self, rx: RxEngines) -> None:
        self.rx = rx

    def make(self, qp: EngineHost) -> tuple[SendEngine, RecvEngine]:
        tx: SendEngine = CTxEngine(qp, self.rx) if qp.evs._bag_mode else PySendEngine(qp)
        # the receive batch hands SACKs straight to a C send engine
        crx = CRxEngine(qp, self.rx, tx.q if isinstance(tx, CTxEngine) else None)
        rx: RecvEngine = crx if self.rx.add(crx) else PyRecvEngine(qp)
        return tx, rx
