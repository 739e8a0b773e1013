"""Configuration read once per process: the settings (``OCTR_*``) and the join policy they
describe. Built on the learning core (a rule's hyper-parameters); no I/O."""
