"""The fleet's hosts and groups, read by ansible-core's own inventory code.

Two sources, one result (:class:`Fleet`):

* servedeck's ``deploy/hosts.yaml`` with ``groups:`` (format: :mod:`servedeck.model.inventory`).
  Its hosts and groups are handed to Ansible as a generated YAML inventory, so host patterns
  (``lab``, ``lab:!fleet-3``, ``fleet-1,fleet-2``) mean what they mean to Ansible.
* a user's own Ansible inventory (INI, YAML, or a directory of them), parsed by
  ``ansible.inventory.manager.InventoryManager`` and ``ansible.vars.manager.VariableManager``
  (ansible-core 2.19: group and host variables, ``children``, ``group_vars/``). Per host:

  ============================================  =========================================
  Ansible variable                              servedeck host entry field
  ============================================  =========================================
  ``ansible_host`` (default: the host's name)   ``ssh.hostname``
  ``ansible_port``                              ``ssh.port``
  ``ansible_user``                              ``ssh.user``
  ``ansible_ssh_private_key_file``              ``ssh.identity_file``
  ``servedeck_known_hosts``                     ``ssh.known_hosts``
  ``servedeck_ssh_config``                      ``ssh.ssh_config``
  ``servedeck_<field>``                         ``<field>`` of
                                                :class:`servedeck.model.inventory.HostEntry`
                                                (``workdir``, ``render_gid``, ``port``,
                                                ``host_port``, ``container_name``,
                                                ``ready_timeout_s``, ``api_host``)
  ============================================  =========================================

  servedeck's per-host commands read servedeck's own format, so the fleet layer writes the
  converted hosts to a ``hosts.yaml`` (:meth:`Fleet.write_servedeck_inventory`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write
from servedeck.grammar import HOST_NAME_RE
from servedeck.model.inventory import HostEntry, Inventory, load_inventory
from servedeck.yamlio import dump_block, read_yaml_file

#: host variables that carry servedeck's host entry fields (besides ``ssh``)
HOST_VAR_PREFIX = "servedeck_"
#: characters that make a host pattern more than one group's or host's name (Ansible's
#: separators, exclusion/intersection, globs, regexes, subscripts; ``.`` also lets a name
#: match hosts besides groups in ansible-core)
_PATTERN_CHARS = set(":,!&*?~[]. ")
_SSH_VARS = {"ansible_host": "hostname", "ansible_port": "port", "ansible_user": "user",
             "ansible_ssh_private_key_file": "identity_file",
             "servedeck_known_hosts": "known_hosts", "servedeck_ssh_config": "ssh_config"}


@dataclass
class Fleet:
    """Hosts (servedeck entries) and groups of one inventory source.

    Attributes:
        source: the file (or directory) read.
        kind: ``"servedeck"`` (deploy/hosts.yaml format) or ``"ansible"``.
        hosts: host name -> :class:`HostEntry`, in inventory order.
        groups: group name -> member host names (``all`` included), in inventory order.
        ansible_source: the Ansible inventory the playbooks run against (the user's own file,
            or the one generated from a servedeck inventory).
    """

    source: Path
    kind: str
    hosts: dict[str, HostEntry]
    groups: dict[str, list[str]]
    ansible_source: Path | None = None

    def select(self, pattern: str) -> list[str]:
        """Host names matching an Ansible host pattern, in inventory order.

        A pattern that is just one group's or one host's name is looked up directly (what
        Ansible's pattern means then: a group wins over a host of the same name, see
        ``InventoryManager._enumerate_matches`` in ansible-core 2.19); anything else is resolved by
        ansible-core's InventoryManager. The shortcut spares a rollout ~0.9 CPU-s of
        importing ansible-core in the controller process before ansible-playbook starts.

        Raises:
            ServedeckError: nothing matches (naming the groups there are).
        """
        name = pattern.strip()
        if not _PATTERN_CHARS.intersection(name):
            members = set(self.groups.get(name) or ([name] if name in self.hosts else []))
            if members and members <= set(self.hosts):
                return [h for h in self.hosts if h in members]
        manager = self._manager()
        matched = {str(h.name) for h in manager.list_hosts(pattern)}
        hosts = [n for n in (str(n) for n in manager.hosts) if n in matched]
        if not hosts:
            raise ServedeckError(f"no host matches {pattern!r}", file=str(self.source),
                                 hint=f"groups: {', '.join(self.groups)}; hosts: {', '.join(self.hosts)}")
        unknown = [h for h in hosts if h not in self.hosts]
        if unknown:
            raise ServedeckError(f"host(s) {', '.join(unknown)} have no servedeck entry",
                                 file=str(self.source))
        return hosts

    def _manager(self):
        """ansible-core's InventoryManager over this fleet (for a servedeck source, over the
        generated YAML inventory of the same hosts and groups)."""
        if self.kind == "ansible":
            return _manager([self.source])
        import tempfile
        with tempfile.TemporaryDirectory(prefix="servedeck-inv-") as tmp:
            path = Path(tmp) / "ansible-inventory.yaml"
            path.write_text(self._ansible_yaml(), encoding="utf-8")
            return _manager([path])

    def _ansible_yaml(self) -> str:
        doc: dict[str, Any] = {"all": {"hosts": {h: None for h in self.hosts}, "children": {
            g: {"hosts": {h: None for h in members}} for g, members in self.groups.items()
            if g not in ("all", "ungrouped")}}}
        return _dump_yaml(doc, header=f"generated by servedeck from {self.source}")

    def write_ansible_inventory(self, directory: Path) -> Path:
        """The Ansible inventory to run playbooks against; for a servedeck source, a YAML
        inventory with the same hosts and groups is written (atomically) to ``directory``.

        Returns:
            the path Ansible should read.
        """
        if self.kind == "ansible":
            self.ansible_source = self.source
            return self.source
        path = Path(directory) / "ansible-inventory.yaml"
        atomic_write(path, self._ansible_yaml())
        self.ansible_source = path
        return path

    def write_servedeck_inventory(self, directory: Path) -> Path:
        """The servedeck inventory file per-host commands read (``--inventory``): the source
        itself for a servedeck source, else a converted ``hosts.yaml`` written to ``directory``."""
        if self.kind == "servedeck":
            return self.source
        doc = {"hosts": {h: e.model_dump(mode="json", exclude_defaults=True) for h, e in self.hosts.items()},
               "groups": {g: m for g, m in self.groups.items() if g not in ("all", "ungrouped")}}
        path = Path(directory) / "hosts.yaml"
        atomic_write(path, _dump_yaml(doc, header=f"converted by servedeck from the Ansible "
                                                  f"inventory {self.source}"))
        return path


def _dump_yaml(doc: Any, header: str) -> str:
    return f"# {header}\n" + dump_block(doc, width=80)


def _manager(sources: list[Path]):
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    return InventoryManager(loader=DataLoader(), sources=[str(s) for s in sources])


def _is_servedeck_file(path: Path) -> bool:
    """A YAML file whose top level is servedeck's (``hosts:`` entries with ``workdir``)."""
    if path.is_dir() or path.suffix.lower() not in (".yaml", ".yml"):
        return False
    raw = read_yaml_file(path)  # within servedeck's bounds, before Ansible reads it
    if not isinstance(raw, dict) or not set(raw) <= {"hosts", "groups"}:
        return False
    hosts = raw.get("hosts") or {}
    return isinstance(hosts, dict) and all(isinstance(v, dict) and "workdir" in v for v in hosts.values())


def _plain(value: Any) -> Any:
    """Ansible's tagged scalars (2.19 data tagging) as plain Python values."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def host_entry_from_vars(name: str, hostvars: dict[str, Any], source: Path) -> HostEntry:
    """Build a servedeck host entry from one Ansible host's variables (table above).

    Raises:
        ServedeckError: naming the file, the host and the variable that is wrong or missing.
    """
    ssh: dict[str, Any] = {"hostname": name}
    for var, field in _SSH_VARS.items():
        if var in hostvars and hostvars[var] not in (None, ""):
            ssh[field] = _plain(hostvars[var])
    fields = set(HostEntry.model_fields) - {"ssh"}
    entry: dict[str, Any] = {"ssh": ssh}
    for key, value in hostvars.items():
        if key.startswith(HOST_VAR_PREFIX) and key[len(HOST_VAR_PREFIX):] in fields:
            entry[key[len(HOST_VAR_PREFIX):]] = _plain(value)
    if entry.get("render_gid") is not None:
        entry["render_gid"] = str(entry["render_gid"])
    if not HOST_NAME_RE.match(name):
        raise ServedeckError(f"host name {name!r} is not valid: letters, digits, '.', '_', '-', starting "
                             "with a letter or digit (it names run records and files)", file=str(source),
                             field=name)
    if "workdir" not in entry:
        raise ServedeckError(f"host {name!r} has no servedeck_workdir variable", file=str(source),
                             field=f"{name}.servedeck_workdir",
                             hint="set servedeck_workdir (absolute path of the deployment on the host)")
    try:
        return HostEntry.model_validate(entry)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        var = ("ansible_" + loc[-1] if loc and loc[0] == "ssh" else HOST_VAR_PREFIX + loc[0]) if loc else ""
        raise ServedeckError(err["msg"].removeprefix("Value error, "), file=str(source),
                             field=f"{name}.{var}" if var else name,
                             hint="see servedeck/fleet/inventory.py for the host variables") from None


def load_fleet(path: str | Path) -> Fleet:
    """Read a fleet inventory: servedeck's hosts.yaml (with groups) or an Ansible inventory.

    Args:
        path: a servedeck ``hosts.yaml``, an Ansible INI/YAML inventory file or directory.

    Returns:
        the :class:`Fleet`; for an Ansible source ``ansible_source`` is already set.

    Raises:
        ServedeckError: missing file, YAML error, invalid host (file, host and variable).
    """
    path = Path(path).absolute()
    if not path.exists():
        raise ServedeckError("inventory not found", file=str(path),
                             hint="pass --inventory FILE (servedeck hosts.yaml or an Ansible inventory)")
    if _is_servedeck_file(path):
        inv: Inventory = load_inventory(path)
        groups = {"all": list(inv.hosts), **{g: list(m) for g, m in inv.groups.items()}}
        return Fleet(source=path, kind="servedeck", hosts=dict(inv.hosts), groups=groups)
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager
    try:
        loader = DataLoader()
        manager = _manager([path])
        variables = VariableManager(loader=loader, inventory=manager)
        names = [str(n) for n in manager.hosts]  # the order the source lists them
        if not names:
            raise ServedeckError("the Ansible inventory has no hosts (or could not be parsed)",
                                 file=str(path), hint="check it with `ansible-inventory -i FILE --graph`")
        hosts = {n: host_entry_from_vars(n, variables.get_vars(host=manager.get_host(n)), path)
                 for n in names}
        groups = {}
        for gname, group in manager.groups.items():
            members = {str(h.name) for h in group.get_hosts()}
            groups[str(gname)] = [n for n in names if n in members]
    except AnsibleError as exc:
        raise ServedeckError(f"Ansible could not read the inventory: {exc.message}",
                             file=str(path)) from None
    return Fleet(source=path, kind="ansible", hosts=hosts, groups=groups, ansible_source=path)
