"""The ``%j2c`` / ``%%j2c`` IPython magics (``magics``) and the kernel-side job runtime they use
(``runtime``). The only modules that import IPython; loaded by ``%load_ext j2c_server``."""
