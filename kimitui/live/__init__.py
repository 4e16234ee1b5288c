"""The live wiring between the engines and the views: a target (local, demo, SSH) opened into a host and what
it says of itself (``targets``), and what a live dashboard knows of the host it watches (``context``)."""
