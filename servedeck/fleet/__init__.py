"""Fleets of card hosts: rolling deploys and experiment sweeps, driven by Ansible.

servedeck stays the expert on one host (``invoke deploy --host``, ``invoke bench``,
``invoke ab``); Ansible (ansible-core, run through ansible-runner) is the engine for many:
inventories and groups, ``serial`` batches, ``max_fail_percentage``, forks, ``--limit``.

Modules:

* :mod:`servedeck.fleet.inventory` -- hosts and groups, from ``deploy/hosts.yaml`` (with
  ``groups:``) or a user's own Ansible inventory, read by ansible-core's inventory code.
* :mod:`servedeck.fleet.command` -- the ONE place the per-host CLI command line is built.
* :mod:`servedeck.fleet.runner` -- runs the playbooks shipped in ``servedeck/fleet/ansible/``
  with ansible-runner and turns its events into per-host results.
* :mod:`servedeck.fleet.rollout` -- ``invoke deploy --hosts GROUP``: batches, failure
  threshold, rollback policy, summary table.
* :mod:`servedeck.fleet.sweep` -- ``invoke sweep``: single-variable experiments planned from
  ``--vary`` lists, scheduled over the hosts, resumed after an interruption.
* :mod:`servedeck.fleet.summary` -- the rich tables and the matplotlib chart.
"""
