"""Scheduler plug-in packages of the tests, installed into a throw-away site folder by
:func:`tests.support.plugins.install_plugins` (never imported from here):

- ``j2c_test_remote``: a working backend written the way the built-ins are (it imports
  ``j2c_server.config`` at the top), ``remote``, with its own settings section; it runs its
  jobs (detached, on this machine) and passes the behavioural contract (``tests/contract``);
- ``j2c_test_broken``: a backend whose module fails to import (a client it needs is missing).
"""
