"""Sub-commands of the ``online-ctr`` command line, one module each."""
