"""The backends a wheel is built for, one module each behind :class:`playbook.backends.base.BackendUnit`;
:mod:`playbook.backends.registry` lists them. This file imports nothing, so that a backend module can be
imported alone."""
