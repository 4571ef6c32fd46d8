"""Validation: parse every raw value, check every rule, collect every problem, then build WorkerConfig.

Problems come out in a stable order: loading problems, then per-property problems in key order, then the
cross-property rules in the order they are written here. Secret values never appear in a message.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from cdcworker.config import topic_creation
from cdcworker.config.errors import HIDDEN, ConfigError, Problem
from cdcworker.config.kafkaclient import ClientSettingError
from cdcworker.config.loader import RawConfig
from cdcworker.config.model import (
    BehaviourConfig,
    ConverterConfig,
    FilterConfig,
    KafkaConfig,
    Patterns,
    Secret,
    SignalConfig,
    SnapshotMode,
    SourceConfig,
    TaskIdentity,
    TlsConfig,
    TopicConfig,
    TopicCreationGroup,
    TransactionConfig,
    Transform,
    TransformConfig,
    WorkerConfig,
)
from cdcworker.config.properties import (
    INT_MAX,
    LONG_MAX,
    ORDERED_TX_METADATA_FACTORY,
    PROPERTIES,
    SMT_FILTER_TRANSACTION_TOPIC_RECORDS,
    SMT_REMOVE_FIELD,
    SMT_USE_LOCAL_VGTID,
    SUPPORTED_TRANSFORMS,
    TABLE_TOPIC_NAMING_STRATEGY,
    VITESS_CONNECTOR_CLASS,
    Property,
    PropType,
    family_of,
    is_secret_key,
    known_names,
    pattern_of,
)
from cdcworker.textcut import quote

_INT_RE = re.compile(r"[+-]?\d+")
_TOPIC_PREFIX_RE = re.compile(r"[A-Za-z0-9._-]+")
_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SPLIT_UNESCAPED_COMMA = re.compile(r"(?<!\\),")
_SKIPPABLE_OPS = ("c", "u", "d", "t")
_TRANSFORM_PARAMS = {SMT_REMOVE_FIELD: {"field_names"}}


def _display(key: str, value: str, secret_keys: set[str]) -> str:
    return HIDDEN if key in secret_keys or is_secret_key(key) else quote(value)


def split_regex_list(value: str) -> list[str]:
    """Debezium's regex-list split: on commas not escaped as ``\\,``; blanks dropped."""
    parts = (p.replace("\\,", ",").strip() for p in _SPLIT_UNESCAPED_COMMA.split(value))
    return [p for p in parts if p]


def compile_regex(expr: str) -> re.Pattern[str]:
    """Anchoring is by use (``fullmatch``); matching is case-insensitive like Debezium's filters."""
    return re.compile(expr, re.IGNORECASE)


def parse_value(prop: Property, text: str, shown: str) -> tuple[object, str | None]:
    """Parse one raw value; returns (value, error message). `shown` is how the value may appear in a message."""
    t = prop.type
    value = text.strip()  # Kafka's ConfigDef trims every value
    if t is PropType.PASSWORD:
        return Secret(value), None
    if t is PropType.STRING:
        return value, None
    if t in (PropType.INT, PropType.LONG):
        if not _INT_RE.fullmatch(value):
            return None, f"{shown} is not {'an integer' if t is PropType.INT else 'a long integer'}"
        number = int(value)
        limit = INT_MAX if t is PropType.INT else LONG_MAX
        if not -limit - 1 <= number <= limit:
            return None, f"{shown} is out of range for {'an int' if t is PropType.INT else 'a long'}"
        if prop.minimum is not None and number < prop.minimum:
            return None, f"{number} is below the minimum {prop.minimum}"
        if prop.maximum is not None and number > prop.maximum:
            return None, f"{number} is above the maximum {prop.maximum}"
        return number, None
    if t is PropType.BOOLEAN:
        if value.lower() not in ("true", "false"):
            return None, f"{shown} is not a boolean (true or false)"
        return value.lower() == "true", None
    if t is PropType.LIST:
        return tuple(p.strip() for p in value.split(",") if p.strip()), None
    if t is PropType.ENUM:
        for allowed in prop.allowed:
            if allowed.lower() == value.lower():
                return allowed, None
        return None, f"{shown} is not one of: {', '.join(prop.allowed)}"
    if t is PropType.REGEX_LIST:
        patterns = []
        for expr in split_regex_list(value):
            try:
                patterns.append(compile_regex(expr))
            except re.error as exc:
                return None, f"{quote(expr)} is not a valid regular expression: {exc}"
        return tuple(patterns), None
    raise AssertionError(t)  # pragma: no cover



# RemoveField paths shardcdc applies (the "efficient transaction metadata" use of the SMT).
_REMOVABLE_FIELDS = frozenset(
    f"transaction.{f}"
    for f in ("id", "total_order", "data_collection_order", "transaction_epoch", "transaction_rank")
)

class _Validator:
    def __init__(self, raw: RawConfig) -> None:
        self.raw = raw
        self.problems: list[Problem] = list(raw.problems)
        self.warnings: list[str] = []
        self.values: dict[str, object] = {}  # typed, defaults applied, for catalogue properties
        self.explicit = set(raw.values)
        self.patterns: dict[str, tuple[int, Patterns]] = {}  # pattern property key -> (N, regexes)
        self.families: dict[str, dict[str, str]] = {}  # family prefix -> {rest: value}

    def problem(self, key: str, message: str) -> None:
        self.problems.append(Problem(key, message))

    def shown(self, key: str) -> str:
        return _display(key, self.raw.values[key].strip(), self.raw.secret_keys)

    # --- per-property ----------------------------------------------------------------------------------------------

    def parse_all(self) -> None:
        names = sorted(set(known_names()))
        for key in sorted(self.raw.values):
            if key in self.raw.unresolved:
                continue
            text = self.raw.values[key]
            prop = PROPERTIES.get(key)
            if prop is not None:
                if prop.name == "time.precision.mode" and text.strip().lower() == "adaptive":
                    self.problem(
                        key,
                        "'adaptive' is no longer supported; use adaptive_time_microseconds, connect or isostring",
                    )
                    continue
                value, error = parse_value(prop, text, self.shown(key))
                if error:
                    self.problem(key, error)
                else:
                    self.values[key] = value
                    if prop.deprecated:
                        self.warnings.append(f"{key} is deprecated; use {prop.deprecated}")
                continue
            matched = pattern_of(key)
            if matched is not None:
                pattern, match = matched
                length = int(match.group(1))
                if length < 1:
                    self.problem(key, "the length in the property name must be a positive integer")
                    continue
                value, error = parse_value(Property(key, pattern.type), text, self.shown(key))
                if error:
                    self.problem(key, error)
                else:
                    self.patterns[key] = (length, _patterns(value))
                continue
            family = family_of(key)
            if family is not None:
                self.families.setdefault(family.prefix, {})[key[len(family.prefix) :]] = text.strip()
                continue
            origin = self.raw.origins.get(key, "")
            where = f" (from {origin})" if origin else ""
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.problem(key, f"unknown property{where}{hint}")
        for prop in PROPERTIES.values():
            if prop.name not in self.raw.values:
                if prop.required:
                    self.problem(prop.name, "required property is missing")
                self.values[prop.name] = prop.default

    def get(self, key: str) -> object:
        return self.values.get(key, PROPERTIES[key].default)

    def int_(self, key: str) -> int:
        return _int(self.get(key))

    def strs(self, key: str) -> tuple[str, ...]:
        """A LIST property as a tuple (empty when unset)."""
        value = self.get(key)
        return value if isinstance(value, tuple) else ()

    def ok(self, *keys: str) -> bool:
        """All keys parsed (or defaulted) without error: cross-property rules only run on sound values."""
        return all(k in self.values for k in keys)

    # --- cross-property rules ------------------------------------------------------------------------------------------

    def check_rules(self) -> None:
        for rule in (
            self.rule_identity,
            self.rule_tasks,
            self.rule_vgtid,
            self.rule_epochs,
            self.rule_filters,
            self.rule_formats,
            self.rule_queue,
            self.rule_topics,
            self.rule_topic_creation,
            self.rule_tls,
            self.rule_signals,
            self.rule_transforms,
            self.rule_exactly_once,
        ):
            rule()

    def rule_identity(self) -> None:
        prefix = self.get("topic.prefix")
        if isinstance(prefix, str) and prefix and not _TOPIC_PREFIX_RE.fullmatch(prefix):
            self.problem("topic.prefix", f"{prefix!r} may only contain letters, digits, '-', '.' and '_'")
        if "database.password" in self.explicit and "database.user" not in self.explicit:
            self.problem("database.password", "set without database.user; static credentials need both")
        connector_class = self.get("connector.class")
        if connector_class != VITESS_CONNECTOR_CLASS:
            self.problem("connector.class", f"{connector_class!r} is not {VITESS_CONNECTOR_CLASS}")

    def rule_tasks(self) -> None:
        if not self.ok(
            "tasks.max",
            "vitess.offset.storage.per.task",
            "vitess.offset.storage.task.key.gen",
            "vitess.prev.num.tasks",
            "shardcdc.task.id",
            "shardcdc.task.count",
            "shardcdc.task.generation",
            "shardcdc.task.prev.count",
            "shardcdc.task.history",
        ):
            return
        per_task = bool(self.get("vitess.offset.storage.per.task"))
        tasks_max = self.int_("tasks.max")
        # Debezium VitessConnector.validateAllFields, same three rules.
        if tasks_max > 1 and not per_task:
            self.problem("vitess.offset.storage.per.task", "needs to be enabled when tasks.max > 1")
        gen = self._aliased_int("shardcdc.task.generation", "vitess.offset.storage.task.key.gen")
        prev = self._aliased_int("shardcdc.task.prev.count", "vitess.prev.num.tasks")
        if per_task and gen is not None and gen < 0:
            self.problem(
                "vitess.offset.storage.task.key.gen",
                "must be 0 or more when vitess.offset.storage.per.task is enabled",
            )
        if gen is not None and gen >= 0 and prev is not None and prev <= 0:
            self.problem(
                "vitess.prev.num.tasks",
                "must be 1 or more when vitess.offset.storage.task.key.gen is 0 or more",
            )
        if gen is not None:
            self._check_history(gen, prev)
        count = self.int_("shardcdc.task.count")
        task_id = self.int_("shardcdc.task.id")
        if count > tasks_max:
            self.problem("shardcdc.task.count", f"{count} exceeds tasks.max ({tasks_max})")
        if count > 1 and not per_task:
            self.problem(
                "shardcdc.task.count", "more than one task needs vitess.offset.storage.per.task=true"
            )
        if task_id >= count:
            self.problem("shardcdc.task.id", f"{task_id} must be less than shardcdc.task.count ({count})")
        self._check_shard_list("vitess.shard")
        self._check_shard_list("shardcdc.task.shards")
        if count > 1 and "shardcdc.task.shards" not in self.explicit:
            self.problem(
                "shardcdc.task.shards",
                "required when shardcdc.task.count > 1 (each task streams its own shards)",
            )
        shards = self.get("vitess.shard")
        task_shards = self.get("shardcdc.task.shards")
        if isinstance(shards, tuple) and isinstance(task_shards, tuple):
            extra = [s for s in task_shards if s not in shards]
            if extra:
                self.problem(
                    "shardcdc.task.shards", f"{', '.join(extra)} not in vitess.shard ({', '.join(shards)})"
                )

    def _check_history(self, gen: int, prev: int | None) -> None:
        """``shardcdc.task.history``: the previous generation first, then strictly older ones."""
        entries = self.get("shardcdc.task.history")
        if not isinstance(entries, tuple) or not entries:
            return
        try:
            chain = parse_history(entries)
        except ValueError as exc:
            self.problem("shardcdc.task.history", str(exc))
            return
        first_gen, first_tasks = chain[0]
        if first_gen != gen - 1 or (prev is not None and first_tasks != prev):
            self.problem(
                "shardcdc.task.history",
                f"starts with {first_gen}:{first_tasks}; it must start with the previous generation, "
                f"{gen - 1}:{prev if prev is not None else '<tasks>'} (vitess.prev.num.tasks)",
            )
            return
        for (newer, _), (g, _) in itertools.pairwise(chain):
            if g >= newer:
                self.problem("shardcdc.task.history", f"generation {g} must be older than {newer} (newest first)")
                return

    def _aliased_int(self, ours: str, debezium: str) -> int | None:
        """Our task-identity name and Debezium's may both be given, but must then agree."""
        mine, theirs = self.get(ours), self.get(debezium)
        if ours in self.explicit and debezium in self.explicit and mine != theirs:
            self.problem(ours, f"{mine} conflicts with {debezium}={theirs}; set one or make them equal")
            return None
        return _int(mine if mine is not None else theirs)

    def _check_shard_list(self, key: str) -> None:
        shards = self.get(key)
        if isinstance(shards, tuple):
            dupes = sorted({s for s in shards if shards.count(s) > 1})
            if dupes:
                self.problem(key, f"lists {', '.join(dupes)} more than once")
            if key in self.explicit and not shards:
                self.problem(key, "is empty; leave it unset to stream every shard")

    def rule_vgtid(self) -> None:
        for key in ("vitess.vgtid", "vitess.gtid"):
            if key not in self.explicit or not self.ok(key, "vitess.shard"):
                continue
            text = str(self.get(key))
            if text in ("current", ""):
                continue
            # Debezium VitessConnectorConfig.validateVgtids, same three rules, plus a parse check.
            shards = self.strs("vitess.shard") if self.get("vitess.shard") is not None else None
            vgtid_shards = self._vgtid_shards(key, text)
            if vgtid_shards is None:
                continue
            if shards is None:
                self.problem(key, "a VGTID needs vitess.shard listing the same shards")
            elif len(shards) != len(vgtid_shards):
                self.problem(key, "must give a position for every shard of vitess.shard")
            elif set(shards) != set(vgtid_shards):
                self.problem(
                    key, f"shards {', '.join(vgtid_shards)} do not match vitess.shard ({', '.join(shards)})"
                )
            if key == "vitess.vgtid" and self.get("snapshot.mode") == SnapshotMode.INITIAL:
                self.warnings.append(
                    "vitess.vgtid is ignored while snapshot.mode=initial (Debezium copies from the "
                    "start); set snapshot.mode=never to start at this VGTID"
                )

    def _vgtid_shards(self, key: str, text: str) -> list[str] | None:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            self.problem(key, f"is not 'current', '' or a VGTID JSON array: {exc.msg} at position {exc.pos}")
            return None
        keyspace = self.get("vitess.keyspace")
        if not isinstance(data, list) or not data:
            self.problem(key, "a VGTID must be a non-empty JSON array of {keyspace, shard, gtid}")
            return None
        shards = []
        for i, entry in enumerate(data):
            if not (
                isinstance(entry, dict)
                and all(isinstance(entry.get(f), str) for f in ("keyspace", "shard", "gtid"))
            ):
                self.problem(key, f"entry {i} needs string fields keyspace, shard and gtid")
                return None
            if keyspace is not None and entry["keyspace"] != keyspace:
                self.problem(
                    key, f"entry {i} is for keyspace {entry['keyspace']!r}, not vitess.keyspace {keyspace!r}"
                )
            shards.append(entry["shard"])
        return shards

    def rule_epochs(self) -> None:
        text = self.get("vitess.shard.epoch.map")
        if isinstance(text, str) and text.strip():
            try:
                data = json.loads(text)
                valid = isinstance(data, dict) and all(
                    isinstance(v, int) and not isinstance(v, bool) for v in data.values()
                )
            except json.JSONDecodeError:
                valid = False
            if not valid:
                self.problem(
                    "vitess.shard.epoch.map",
                    'must be a JSON object of shard to epoch, e.g. {"-80":0,"80-":1}',
                )
        if (
            self.get("vitess.inherit.epoch") is True
            and self.get("transaction.metadata.factory") != ORDERED_TX_METADATA_FACTORY
        ):
            self.problem(
                "vitess.inherit.epoch", f"needs transaction.metadata.factory={ORDERED_TX_METADATA_FACTORY}"
            )

    def rule_filters(self) -> None:
        for a, b in (
            ("table.include.list", "table.exclude.list"),
            ("column.include.list", "column.exclude.list"),
        ):
            if a in self.explicit and b in self.explicit:
                self.problem(b, f"cannot be used together with {a}")
        ops = self.get("skipped.operations")
        if isinstance(ops, tuple):
            bad = [o for o in ops if o not in (*_SKIPPABLE_OPS, "none")]
            if bad:
                self.problem("skipped.operations", f"{', '.join(bad)} not in: c, u, d, t, none")
            elif "none" in ops and len(ops) > 1:
                self.problem("skipped.operations", "'none' cannot be combined with other operations")

    def rule_formats(self) -> None:
        self._pairs("vitess.grpc.headers", ":", None)
        self._pairs("custom.metric.tags", "=", _LABEL_RE)
        text = self.get("message.key.columns")
        if isinstance(text, str):
            for entry in (e.strip() for e in text.split(";") if e.strip()):
                table, sep, cols = entry.partition(":")
                if not sep or not table.strip() or not cols.strip():
                    self.problem(
                        "message.key.columns", f"entry {entry!r} is not <keyspace>.<table>:<column regex>,..."
                    )
                    continue
                for expr in (table.strip(), *split_regex_list(cols)):
                    try:
                        compile_regex(expr)
                    except re.error as exc:
                        self.problem(
                            "message.key.columns", f"{expr!r} is not a valid regular expression: {exc}"
                        )

    def _pairs(self, key: str, sep: str, name_re: re.Pattern[str] | None) -> None:
        text = self.get(key)
        if not isinstance(text, str):
            return
        for entry in (e.strip() for e in text.split(",") if e.strip()):
            name, found, value = entry.partition(sep)
            if not found or not name.strip() or sep in value:
                self.problem(key, f"entry {entry!r} is not name{sep}value")
            elif name_re is not None and not name_re.fullmatch(name.strip()):
                self.problem(key, f"{name.strip()!r} is not a valid metric label name")

    def rule_queue(self) -> None:
        if self.ok("max.queue.size", "max.batch.size"):
            size, batch = self.int_("max.queue.size"), self.int_("max.batch.size")
            if size <= batch:
                self.problem("max.queue.size", f"{size} must be larger than max.batch.size ({batch})")

    def rule_topics(self) -> None:
        for ours, theirs in (("topic.heartbeat.prefix", "heartbeat.topics.prefix"),):
            if ours in self.explicit and theirs in self.explicit and self.get(ours) != self.get(theirs):
                self.problem(theirs, f"conflicts with {ours}; set only {ours}")
        if self.get("topic.naming.strategy") != TABLE_TOPIC_NAMING_STRATEGY:
            for key in ("override.data.change.topic.prefix", "override.schema.change.topic"):
                if key in self.explicit:
                    self.problem(
                        key, f"only applies with topic.naming.strategy={TABLE_TOPIC_NAMING_STRATEGY}"
                    )
        if not str(self.get("topic.delimiter")):
            self.problem("topic.delimiter", "must not be empty")

    def rule_topic_creation(self) -> None:
        found, warnings = topic_creation.problems(
            self.families.get(topic_creation.PREFIX, {}),
            self.strs("topic.creation.groups"),
            self.get("topic.creation.default.partitions"),
            self.get("topic.creation.default.replication.factor"),
        )
        self.problems.extend(found)
        self.warnings.extend(warnings)

    def topic_creation_groups(self) -> tuple[TopicCreationGroup, ...]:
        if not topic_creation.uses_topic_creation(bool(self.get("topic.creation.enable")), self.explicit):
            return ()
        return topic_creation.build_groups(
            self.families.get(topic_creation.PREFIX, {}),
            self.strs("topic.creation.groups"),
            self.int_("topic.creation.default.partitions"),
            self.int_("topic.creation.default.replication.factor"),
        )

    def rule_tls(self) -> None:
        files = (
            "shardcdc.vitess.tls.ca.file",
            "shardcdc.vitess.tls.cert.file",
            "shardcdc.vitess.tls.key.file",
        )
        given = [k for k in (*files, "shardcdc.vitess.tls.server.name") if self.get(k)]
        if given and self.get("shardcdc.vitess.tls.enabled") is not True:
            self.problem(given[0], "needs shardcdc.vitess.tls.enabled=true")
        if bool(self.get(files[1])) != bool(self.get(files[2])):
            missing = files[2] if self.get(files[1]) else files[1]
            self.problem(
                missing, f"must be set together with {files[1] if missing == files[2] else files[2]}"
            )
        for key in files:
            path = self.get(key)
            if isinstance(path, str) and path and not Path(path).is_file():
                self.problem(key, f"file {path} does not exist")

    def rule_signals(self) -> None:
        collection = self.get("signal.data.collection")
        if isinstance(collection, str) and collection:
            keyspace, dot, table = collection.partition(".")
            if not dot or not keyspace or not table:
                self.problem("signal.data.collection", f"{collection!r} is not <keyspace>.<table>")
            elif self.get("vitess.keyspace") not in (None, keyspace):
                self.problem("signal.data.collection", f"keyspace {keyspace!r} is not vitess.keyspace")
        channels = self.get("signal.enabled.channels")
        if isinstance(channels, tuple):
            bad = [c for c in channels if c not in ("source", "kafka")]
            if bad:
                self.problem("signal.enabled.channels", f"{', '.join(bad)} not in: source, kafka")

    def rule_transforms(self) -> None:
        aliases = self.strs("transforms")
        settings = self.families.get("transforms.", {})
        by_alias: dict[str, dict[str, str]] = {}
        for rest, value in settings.items():
            alias, dot, param = rest.partition(".")
            if not dot or not param:
                self.problem(f"transforms.{rest}", "expected transforms.<alias>.<setting>")
                continue
            by_alias.setdefault(alias, {})[param] = value
        for alias in sorted(set(by_alias) - set(aliases)):
            self.problem(f"transforms.{alias}.type", f"alias {alias!r} is not listed in transforms")
        names = ", ".join(t.rsplit(".", 1)[1] for t in SUPPORTED_TRANSFORMS)
        for alias in aliases:
            params = by_alias.get(alias, {})
            type_ = params.get("type")
            if not type_:
                self.problem(f"transforms.{alias}.type", "required for every alias listed in transforms")
                continue
            if type_ not in SUPPORTED_TRANSFORMS:
                self.problem(
                    f"transforms.{alias}.type",
                    f"{type_!r} is not supported; shardcdc implements only "
                    f"{names} of io.debezium.connector.vitess.transforms",
                )
                continue
            allowed = {"type"} | _TRANSFORM_PARAMS.get(type_, set())
            for param in sorted(set(params) - allowed):
                self.problem(f"transforms.{alias}.{param}", f"not a setting of {type_.rsplit('.', 1)[1]}")
            if type_ == SMT_REMOVE_FIELD and not params.get("field_names", "").strip():
                self.problem(f"transforms.{alias}.field_names", "required for RemoveField")
            elif type_ == SMT_REMOVE_FIELD:
                # Applied natively where the records are built: only the transaction block's fields.
                bad = [
                    f.strip()
                    for f in params["field_names"].split(",")
                    if f.strip() and f.strip() not in _REMOVABLE_FIELDS
                ]
                if bad:
                    self.problem(
                        f"transforms.{alias}.field_names",
                        f"{', '.join(bad)}: shardcdc's RemoveField removes only "
                        f"{', '.join(sorted(_REMOVABLE_FIELDS))}",
                    )

    def transactional(self) -> bool:
        support = self.get("exactly.once.support")
        return support == "required" or (
            support == "requested" and self.get("exactly.once.source.support") == "enabled"
        )

    def rule_exactly_once(self) -> None:
        producer = self.families.get("producer.", {})
        if "transactional.id" in producer:
            self.problem(
                "producer.transactional.id", "is derived by shardcdc from name and task key; remove it"
            )
        if not self.transactional():
            return
        why = "exactly-once delivery"
        if producer.get("enable.idempotence", "true").lower() != "true":
            self.problem("producer.enable.idempotence", f"must be true for {why}")
        if producer.get("acks", "all").lower() not in ("all", "-1"):
            self.problem("producer.acks", f"must be all for {why}")
        inflight = producer.get("max.in.flight.requests.per.connection")
        if inflight is not None and (not inflight.isdigit() or int(inflight) > 5):
            self.problem("producer.max.in.flight.requests.per.connection", f"must be 5 or less for {why}")
        level = self.families.get("consumer.", {}).get("isolation.level", "read_committed")
        if level != "read_committed":
            self.problem("consumer.isolation.level", f"must be read_committed for {why}")

    # --- building --------------------------------------------------------------------------------------------------

    def build(self) -> WorkerConfig:
        g = self.get
        name, prefix = str(g("name")), str(g("topic.prefix"))
        task = self._task()
        source = self._source()
        kafka = self._kafka(name, task)
        converters = self._converters()
        topics = self._topics(prefix, str(g("topic.delimiter")))
        filters = self._filters()
        transforms = self._transforms()
        signals = self._signals(prefix)
        behaviour = self._behaviour()
        secret_keys = frozenset(k for k in self.raw.values if k in self.raw.secret_keys or is_secret_key(k))
        return WorkerConfig(
            name=name,
            topic_prefix=prefix,
            source=source,
            task=task,
            kafka=kafka,
            converters=converters,
            topics=topics,
            filters=filters,
            transactions=TransactionConfig(
                bool(g("provide.transaction.metadata")), str(g("transaction.metadata.factory"))
            ),
            transforms=transforms,
            signals=signals,
            behaviour=behaviour,
            properties=MappingProxyType(dict(self.values)),
            raw=MappingProxyType(dict(self.raw.values)),
            secret_keys=secret_keys,
            warnings=tuple(self.warnings),
        )

    def _task(self) -> TaskIdentity:
        g = self.get
        return TaskIdentity(
            per_task=bool(g("vitess.offset.storage.per.task")),
            task_id=_int(g("shardcdc.task.id")),
            task_count=_int(g("shardcdc.task.count")),
            tasks_max=_int(g("tasks.max")),
            generation=_int(_first(g("shardcdc.task.generation"), g("vitess.offset.storage.task.key.gen"))),
            prev_task_count=_int(_first(g("shardcdc.task.prev.count"), g("vitess.prev.num.tasks"))),
            shards=_opt_tuple(_first(g("shardcdc.task.shards"), g("vitess.shard"))),
            history=parse_history(_opt_tuple(g("shardcdc.task.history")) or ()),
            offsets_expected=bool(g("shardcdc.task.offsets.expected")),
        )

    def _source(self) -> SourceConfig:
        g = self.get
        keepalive = _int(g("vitess.keepalive.interval.ms"))
        return SourceConfig(
            hostname=str(g("database.hostname")),
            port=_int(g("database.port")),
            user=_opt_str(g("database.user")),
            password=_secret(g("database.password")),
            keyspace=str(g("vitess.keyspace")),
            shards=_opt_tuple(g("vitess.shard")),
            vgtid=str(g("vitess.vgtid")),
            tablet_type=str(g("vitess.tablet.type")),
            stop_on_reshard=bool(g("vitess.stop_on_reshard")),
            stream_keyspace_heartbeats=bool(g("vitess.stream.keyspace.heartbeats")),
            exclude_keyspace_from_table_name=bool(g("vitess.exclude.keyspace.from.table.name")),
            exclude_empty_shards=bool(g("vitess.exclude.empty.shards")),
            keepalive_interval_ms=None if keepalive == LONG_MAX else keepalive,
            grpc_headers=_pairs(g("vitess.grpc.headers"), ":"),
            max_inbound_message_size=_int(g("vitess.grpc.max_inbound_message_size")),
            load_balancing_policy=str(g("vitess.grpc.default.load.balancing.policy")),
            shard_epoch_map=MappingProxyType(json.loads(str(g("vitess.shard.epoch.map")) or "{}")),
            inherit_epoch=bool(g("vitess.inherit.epoch")),
            connector_generation=_int(g("vitess.connector.generation")),
            tls=TlsConfig(
                enabled=bool(g("shardcdc.vitess.tls.enabled")),
                ca_file=_opt_str(g("shardcdc.vitess.tls.ca.file")),
                cert_file=_opt_str(g("shardcdc.vitess.tls.cert.file")),
                key_file=_opt_str(g("shardcdc.vitess.tls.key.file")),
                server_name=_opt_str(g("shardcdc.vitess.tls.server.name")),
            ),
            snapshot_mode=SnapshotMode(str(g("snapshot.mode"))),
            snapshot_include_collection_list=_patterns(g("snapshot.include.collection.list")),
            heartbeat_interval_ms=_int(g("heartbeat.interval.ms")),
        )

    def _kafka(self, name: str, task: TaskIdentity) -> KafkaConfig:
        g = self.get
        fam = self.families
        common = {k: v.strip() for k, v in self.raw.values.items() if k.startswith(("sasl.", "ssl."))}
        common["security.protocol"] = str(g("security.protocol"))
        transactional = self.transactional()
        return KafkaConfig(
            bootstrap_servers=self.strs("bootstrap.servers"),
            offsets_topic=str(g("offset.storage.topic")),
            offsets_partitions=_int(g("offset.storage.partitions")),
            offsets_replication_factor=_int(g("offset.storage.replication.factor")),
            offset_flush_interval_ms=_int(g("offset.flush.interval.ms")),
            offset_flush_timeout_ms=_int(g("offset.flush.timeout.ms")),
            exactly_once_support=str(g("exactly.once.support")),
            exactly_once_source_support=str(g("exactly.once.source.support")),
            transactional=transactional,
            transactional_id=f"{name}-{task.context_task_id}" if transactional else None,
            topic_creation_enable=bool(g("topic.creation.enable")),
            topic_creation=self.topic_creation_groups(),
            common=_frozen(common),
            producer=_frozen(fam.get("producer.", {})),
            consumer=_frozen(fam.get("consumer.", {})),
            admin=_frozen(fam.get("admin.", {})),
        )

    def _converters(self) -> ConverterConfig:
        g = self.get
        return ConverterConfig(
            key_schemas_enable=bool(g("key.converter.schemas.enable")),
            value_schemas_enable=bool(g("value.converter.schemas.enable")),
            key_decimal_format=str(g("key.converter.decimal.format")),
            value_decimal_format=str(g("value.converter.decimal.format")),
            key_replace_null_with_default=bool(g("key.converter.replace.null.with.default")),
            value_replace_null_with_default=bool(g("value.converter.replace.null.with.default")),
        )

    def _topics(self, prefix: str, delim: str) -> TopicConfig:
        g = self.get
        table_naming = g("topic.naming.strategy") == TABLE_TOPIC_NAMING_STRATEGY
        heartbeat_prefix = str(
            g("topic.heartbeat.prefix")
            if "topic.heartbeat.prefix" in self.explicit
            else g("heartbeat.topics.prefix")
        )
        return TopicConfig(
            naming_strategy=str(g("topic.naming.strategy")),
            delimiter=delim,
            cache_size=_int(g("topic.cache.size")),
            transaction_topic=f"{prefix}{delim}{g('topic.transaction')}",
            heartbeat_topic=f"{heartbeat_prefix}{delim}{prefix}",
            schema_change_topic=str(g("override.schema.change.topic") or prefix) if table_naming else prefix,
            data_change_prefix=str(g("override.data.change.topic.prefix") or prefix)
            if table_naming
            else prefix,
        )

    def _filters(self) -> FilterConfig:
        g = self.get
        ops = self.strs("skipped.operations")
        return FilterConfig(
            table_include=_patterns(g("table.include.list")),
            table_exclude=_patterns(g("table.exclude.list")),
            column_include=_patterns(g("column.include.list")),
            column_exclude=_patterns(g("column.exclude.list")),
            column_truncate=self._pattern_family("column.truncate.to."),
            column_mask=self._pattern_family("column.mask.with."),
            message_key_columns=_key_columns(g("message.key.columns")),
            column_propagate_source_type=_patterns(g("column.propagate.source.type")),
            datatype_propagate_source_type=_patterns(g("datatype.propagate.source.type")),
            skipped_operations=frozenset(o for o in ops if o in _SKIPPABLE_OPS),
        )

    def _transforms(self) -> TransformConfig:
        fam = self.families
        chain = tuple(
            Transform(
                alias,
                fam["transforms."][f"{alias}.type"],
                _frozen(
                    {
                        k[len(alias) + 1 :]: v
                        for k, v in fam["transforms."].items()
                        if k.startswith(alias + ".") and k != f"{alias}.type"
                    }
                ),
            )
            for alias in self.strs("transforms")
        )
        return TransformConfig(
            chain=chain,
            filter_transaction_topic_records=any(
                t.type == SMT_FILTER_TRANSACTION_TOPIC_RECORDS for t in chain
            ),
            remove_fields=tuple(
                f.strip()
                for t in chain
                if t.type == SMT_REMOVE_FIELD
                for f in t.params.get("field_names", "").split(",")
                if f.strip()
            ),
            use_local_vgtid=any(t.type == SMT_USE_LOCAL_VGTID for t in chain),
        )

    def _signals(self, prefix: str) -> SignalConfig:
        g = self.get
        fam = self.families
        return SignalConfig(
            data_collection=_opt_str(g("signal.data.collection")),
            channels=self.strs("signal.enabled.channels"),
            kafka_topic=str(g("signal.kafka.topic") or f"{prefix}-signal"),
            kafka_group_id=str(g("signal.kafka.groupId")),
            consumer=_frozen(fam.get("signal.consumer.", {})),
        )

    def _behaviour(self) -> BehaviourConfig:
        g = self.get
        failure = str(g("event.processing.failure.handling.mode"))
        return BehaviourConfig(
            decimal_handling_mode=str(g("decimal.handling.mode")),
            time_precision_mode=str(g("time.precision.mode")),
            bigint_unsigned_handling_mode=str(g("bigint.unsigned.handling.mode")),
            binary_handling_mode=str(g("binary.handling.mode")),
            include_unknown_datatypes=bool(g("include.unknown.datatypes")),
            override_datetime_to_nullable=bool(g("override.datetime.to.nullable")),
            schema_name_adjustment_mode=str(g("schema.name.adjustment.mode")),
            field_name_adjustment_mode=str(g("field.name.adjustment.mode")),
            tombstones_on_delete=bool(g("tombstones.on.delete")),
            include_schema_changes=bool(g("include.schema.changes")),
            extended_headers_enabled=bool(g("extended.headers.enabled")),
            failure_handling_mode="skip" if failure == "ignore" else failure,
            max_queue_size=_int(g("max.queue.size")),
            max_queue_size_in_bytes=_int(g("max.queue.size.in.bytes")),
            max_batch_size=_int(g("max.batch.size")),
            poll_interval_ms=_int(g("poll.interval.ms")),
            errors_max_retries=_int(g("errors.max.retries")),
            retriable_restart_wait_ms=_int(g("retriable.restart.connector.wait.ms")),
            retry_backoff_max_ms=_int(g("shardcdc.retry.backoff.max.ms")),
            heartbeat_interval_ms=_int(g("heartbeat.interval.ms")),
            heartbeat_low_watermark=bool(g("shardcdc.heartbeat.low.watermark")),
            custom_metric_tags=_pairs(g("custom.metric.tags"), "="),
            metrics_port=_int(g("shardcdc.metrics.port")),
            metrics_address=str(g("shardcdc.metrics.address")),
            shutdown_grace_ms=_int(g("shardcdc.shutdown.grace.ms")),
        )

    def _pattern_family(self, prefix: str) -> tuple[tuple[int, Patterns], ...]:
        return tuple(
            sorted((v for k, v in self.patterns.items() if k.startswith(prefix)), key=lambda item: item[0])
        )


def _first(*values: object) -> object:
    return next((v for v in values if v is not None), None)


def parse_history(entries: Iterable[str]) -> tuple[tuple[int, int], ...]:
    """``shardcdc.task.history`` entries ``<generation>:<tasks>`` as (generation, tasks) pairs."""
    out: list[tuple[int, int]] = []
    for entry in entries:
        gen, sep, tasks = entry.partition(":")
        try:
            pair = (int(gen), int(tasks))
        except ValueError:
            pair = (-1, 0)
        if not sep or pair[0] < 0 or pair[1] < 1:
            raise ValueError(f"{entry!r} is not <generation>:<tasks> with generation >= 0 and tasks >= 1")
        out.append(pair)
    return tuple(out)


def _int(value: object) -> int:
    assert isinstance(value, int), value
    return value


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _opt_tuple(value: object) -> tuple[str, ...] | None:
    return tuple(str(v) for v in value) if isinstance(value, tuple) else None


def _secret(value: object) -> Secret | None:
    return value if isinstance(value, Secret) else None


def _patterns(value: object) -> Patterns:
    return value if isinstance(value, tuple) else ()


def _frozen(d: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(d))


def _pairs(text: object, sep: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(text, str):
        return ()
    pairs = (e.strip().partition(sep) for e in text.split(",") if e.strip())
    return tuple((k.strip(), v.strip()) for k, _, v in pairs)


def _key_columns(text: object) -> tuple[tuple[re.Pattern[str], Patterns], ...]:
    if not isinstance(text, str):
        return ()
    out = []
    for entry in (e.strip() for e in text.split(";") if e.strip()):
        table, _, cols = entry.partition(":")
        out.append((compile_regex(table.strip()), tuple(compile_regex(c) for c in split_regex_list(cols))))
    return tuple(out)


def validate(raw: RawConfig) -> WorkerConfig:
    """Check everything; raise ConfigError listing every problem, else return the typed configuration."""
    validator = _Validator(raw)
    validator.parse_all()
    validator.check_rules()
    if validator.problems:
        raise ConfigError(validator.problems)
    config = validator.build()
    problems = _client_problems(config)
    if problems:
        raise ConfigError(problems)
    return config


def _client_problems(config: WorkerConfig) -> list[Problem]:
    """Kafka client settings librdkafka cannot take (a JKS store, an unknown login module), found at
    load time instead of when the first client is made."""
    found: dict[str, Problem] = {}
    clients = [("producer", None), ("consumer", None), ("admin", None), ("consumer", config.signals.consumer)]
    for kind, overrides in clients:
        try:
            config.kafka.client_config(kind, overrides)
        except ClientSettingError as exc:
            found.setdefault(str(exc), Problem(exc.key, exc.message))
    return list(found.values())
