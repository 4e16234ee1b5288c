"""The campaign: its phases as one state machine of async workers (``machine``), each phase a worker
(``phases``, ``transition``, ``probe``), the campaign file (``config``), the decode-step budget and its
verdict (``analysis``), and resuming a campaign cut off by a crash (``resume``).

The cleanup CLI, the dashboard's F / M / R actions and ``kimitui campaign`` all run phases through here:
one code path sequences a phase's start, its steps and its end.
"""
