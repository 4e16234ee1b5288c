"""The vocabulary of a profiling session: every event that can happen, as typed records.

Each event serialises to one JSON object whose first two keys are always ``t`` (unix seconds) and
``type`` (the registry name below), so a run file can be indexed without decoding every line.

An event is a value: a frozen dataclass (the records inside one too), built once and never changed
(``dataclasses.replace`` makes a changed copy), so the fold, a replay's seeks and every view can share it.
Decoding checks every field against its annotation (``kimitui.core.typed``): a line of the wrong shape is
refused whole, with the event type and the field named, rather than becoming an event the fold trips on.

The package: ``base`` (Event), one module per part of the session (``host``, ``phase``, ``cleanup``, ``macro``,
``micro``, ``campaign``, ``fleet``), each declaring its ``EVENTS``, and ``registry`` (every type by name, read
from those declarations; ``encode``/``decode``). Everything is importable from here.
"""

from __future__ import annotations

from kimitui.core.events.base import (  # noqa: F401
    Event,
)
from kimitui.core.events.campaign import (  # noqa: F401
    CAMPAIGN_EVENT_TYPES,
    CAMPAIGN_PHASES,
    CUT_OFF,
    BudgetRow,
    CampaignControl,
    CampaignEnd,
    CampaignPlan,
    CampaignResume,
    DecodeBudget,
    DrainProgress,
    ProbeResult,
    ServedModel,
)
from kimitui.core.events.cleanup import (  # noqa: F401
    CleanupPlan,
    Consent,
    GpuVerdict,
    HostCommand,
    SignalLate,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    Verification,
)
from kimitui.core.events.fleet import (  # noqa: F401
    FleetGpu,
    FleetHost,
    FleetSample,
    HostState,
)
from kimitui.core.events.host import (  # noqa: F401
    ConnectionState,
    GpuSample,
    HostSample,
    LogLine,
    ProcKind,
    ProcRef,
    ProcSample,
)
from kimitui.core.events.macro import (  # noqa: F401
    MacroPoint,
    MacroProgress,
    MacroRequests,
    MacroVerdict,
    RequestFieldsDropped,
    RequestRecord,
    ServerSample,
    SweepStatus,
    first_error,
    level_failed,
)
from kimitui.core.events.micro import (  # noqa: F401
    AllReduceRow,
    GemmRow,
    MicroEnd,
    MicroEnv,
    MicroPlan,
    MicroProgress,
    TopoGpu,
    Topology,
)
from kimitui.core.events.phase import (  # noqa: F401
    PhaseEnd,
    PhaseStart,
    phase_outcome,
)
from kimitui.core.events.registry import (  # noqa: F401
    EVENT_TYPES,
    EventDecodeError,
    decode,
    encode,
    from_dict,
)
from kimitui.core.level_result import LevelResult  # noqa: F401
