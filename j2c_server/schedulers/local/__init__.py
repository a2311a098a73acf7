"""The ``local`` backend (the embedded default): detached supervisors on this machine."""
