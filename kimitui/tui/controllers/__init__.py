"""What a key starts on the host: one controller per kind of work (macro, micro, cleanup, campaign), each
with ``start``, ``cancel`` and ``running`` (``base.Controller``), owned by the app and typed against the
members of it they use (``port.AppPort``); they publish events and never draw."""
