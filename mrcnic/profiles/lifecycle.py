"""The lifecycle every profile goes through (h11 style: a table of transitions)."""

from __future__ import annotations

import enum

from mrcnic.errors import MrcError


class ProfileStateError(MrcError, RuntimeError):
    """An operation the profile's lifecycle state does not allow (e.g. edit while ONLINE)."""


# -- the lifecycle ------------------------------------------------------------------------------


class ProfileState(enum.Enum):
    INIT = "INIT"  # created, nothing configured
    OFFLINE = "OFFLINE"  # configured, editable, not usable by QPs
    ONLINE = "ONLINE"  # usable by QPs, not editable


class ProfileOp(enum.Enum):
    CONFIGURE = "CONFIGURE"  # set the mode / algorithm and the main fields
    EDIT = "EDIT"  # change fields of a configured profile (EVs, options, event mask)
    ONLINE = "ONLINE"
    OFFLINE = "OFFLINE"
    RESET = "RESET"  # back to INIT, configuration dropped
    USE = "USE"  # a QP takes its configuration from the profile


_I, _F, _N = ProfileState.INIT, ProfileState.OFFLINE, ProfileState.ONLINE
#: (state, operation) -> next state; a pair not listed is refused (ProfileStateError).
PROFILE_TRANSITIONS: dict[tuple[ProfileState, ProfileOp], ProfileState] = {
    (_I, ProfileOp.CONFIGURE): _F,
    (_F, ProfileOp.CONFIGURE): _F,
    (_F, ProfileOp.EDIT): _F,
    (_F, ProfileOp.ONLINE): _N,
    (_F, ProfileOp.RESET): _I,
    (_N, ProfileOp.OFFLINE): _F,
    (_N, ProfileOp.USE): _N,
}
del _I, _F, _N


def mermaid() -> str:
    """The profile lifecycle as a Mermaid state diagram (self-loops omitted)."""
    lines = ["stateDiagram-v2", "    [*] --> INIT"]
    for (src, op), dst in PROFILE_TRANSITIONS.items():
        if src is not dst:
            lines.append(f"    {src.name} --> {dst.name}: {op.name}")
    return "\n".join(lines)


class Lifecycle:
    """The state a profile is in and the one place it changes."""

    kind = "profile"

    def __init__(self, profile_id: int) -> None:
        if not isinstance(profile_id, int) or profile_id < 0:
            raise ValueError(f"profile_id must be a non-negative integer, not {profile_id!r}")
        self.profile_id = profile_id
        self.state = ProfileState.INIT
        self._users = 0  # QPs created from this profile and not destroyed

    @property
    def users(self) -> int:
        """How many live QPs were created from this profile."""
        return self._users

    def _step(self, op: ProfileOp) -> None:
        self.state = self._check(op)

    def _check(self, op: ProfileOp) -> ProfileState:
        """The state ``op`` leads to (nothing changes), or ProfileStateError."""
        try:
            return PROFILE_TRANSITIONS[(self.state, op)]
        except KeyError:
            allowed = sorted(o.name for (s, o) in PROFILE_TRANSITIONS if s is self.state)
            raise ProfileStateError(
                f"{self.kind} {self.profile_id}: {op.name} is not allowed in {self.state.name} "
                f"(allowed: {', '.join(allowed)})"
            ) from None

    def _check_online(self) -> None: ...  # what a profile must satisfy to go ONLINE

    def online(self) -> None:
        """OFFLINE -> ONLINE, once the configuration is complete."""
        if self.state is ProfileState.OFFLINE:
            self._check_online()
        self._step(ProfileOp.ONLINE)

    def offline(self) -> None:
        """ONLINE -> OFFLINE, to edit it; refused while QPs use the profile."""
        if self.state is ProfileState.ONLINE and self._users:
            raise ProfileStateError(
                f"{self.kind} {self.profile_id} is in use by {self._users} QP(s): destroy them "
                "before taking it offline"
            )
        self._step(ProfileOp.OFFLINE)

    def reset(self) -> None:
        """OFFLINE -> INIT, dropping the configuration."""
        self._step(ProfileOp.RESET)
        self._clear()

    def _clear(self) -> None: ...

    # Device.create_qp / destroy_qp keep the count of QPs using the profile
    def _attach(self) -> None:
        self._step(ProfileOp.USE)
        self._users += 1

    def _detach(self) -> None:
        self._users = max(0, self._users - 1)


# -- EV profiles -------------------------------------------------------------------------------
