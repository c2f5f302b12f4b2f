"""``AclAuthorizer``: Kafka's ZooKeeper-mode authorizer
(``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``).

The decision, for a principal asking to do an operation on a resource (always a LITERAL name)
from a host, as ``AclAuthorizer.authorizeAction`` takes it:

    1. a super user (``super.users``, ``;``-separated principals) is allowed;
    2. the ACLs that apply are those of the literal name, of the wildcard ``*`` of its type,
       and of every PREFIXED pattern that is a prefix of the name;
    3. none apply: allowed only with ``allow.everyone.if.no.acl.found=true``;
    4. a DENY that matches denies (DENY before ALLOW);
    5. otherwise an ALLOW that matches allows. READ, WRITE, DELETE and ALTER imply DESCRIBE;
       ALTER_CONFIGS implies DESCRIBE_CONFIGS.

An entry matches when its principal is the principal or ``User:*``, its operation the
operation or ALL, and its host the client's address or ``*``.

Every broker keeps every ACL in memory (``_cache``, replaced whole on a change so that a
decision reads one consistent snapshot without a lock), loaded at start and refreshed from the
change notifications (``AclChangeListener``): a change made through any broker takes effect on
all within the notification's round trip. Writes go to ZooKeeper first, conditionally on the
znode version read (retried up to ``MAX_UPDATE_RETRIES`` times), then to this broker's cache,
then a notification tells the others.

Audit: each decision is logged to ``kafka.authorizer.logger`` in Kafka's line shape; a denial of
an explicitly requested resource at INFO, at most once per (principal, operation, resource)
every ``audit_interval_s`` (the following ones are counted and the count is in the next line),
allowed decisions at DEBUG (``audit_log``). What a request asks for is an ``Action``
(``action.py``).

Thread-safety: decisions read the cache snapshot; writes hold ``_lock``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from storage_core.errors import InvalidConfigError
from storage_core.protocol.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from storage_core.security.authorizer.action import Action as Action  # noqa: PLC0414 (export)
from storage_core.security.authorizer.audit_log import AUDIT_INTERVAL_S, AuditLog
from storage_core.security.kafka_principal import KafkaPrincipal
from storage_core.zk.acl_znodes import (
    NO_ACLS,
    STORED_PATTERN_TYPES,
    AclChangeListener,
    AclZkStore,
    AclZnodeError,
    VersionedAcls,
)

logger = logging.getLogger(__name__)

ACL_AUTHORIZER_CLASS = "kafka.security.authorizer.AclAuthorizer"
SUPER_USERS_CONFIG = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG = "allow.everyone.if.no.acl.found"
MAX_UPDATE_RETRIES = 10
RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_JITTER_MS = 50

_LITERAL = int(PatternType.LITERAL)
_PREFIXED = int(PatternType.PREFIXED)
_IMPLIED: Mapping[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}


class AclUpdateError(Exception):
    """An ACL change that could not be written (a request error for its bindings)."""

    def __init__(self, error_code: str, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True, kw_only=True)
class AclCreateResult:
    error: AclUpdateError | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AclBindingDeleteResult:
    binding: AclBinding
    error: AclUpdateError | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthorizerConfig:
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool

    @staticmethod
    def from_props(props: Mapping[str, str]) -> AuthorizerConfig:
        users = set()
        for text in props.get(SUPER_USERS_CONFIG, "").split(";"):
            if text.strip():
                try:
                    users.add(str(KafkaPrincipal.parse(text)))
                except ValueError as exc:
                    raise InvalidConfigError(f"{SUPER_USERS_CONFIG}: {exc}") from None
        allow = props.get(ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG, "false").strip().lower()
        if allow not in ("true", "false"):
            raise InvalidConfigError(
                f"{ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG}={allow} is not a boolean: use true or"
                " false"
            )
        return AuthorizerConfig(
            super_users=frozenset(users), allow_everyone_if_no_acl_found=allow == "true"
        )


class AclAuthorizer:
    """Kafka's ``AclAuthorizer`` over an ``AclZkStore`` (see the module docstring)."""

    def __init__(
        self,
        store: AclZkStore,
        config: AuthorizerConfig,
        *,
        audit_interval_s: float = AUDIT_INTERVAL_S,
        change_poll_interval_s: float = 30.0,
    ) -> None:
        self._store = store
        self.config = config
        self._cache: dict[ResourcePattern, VersionedAcls] = {}
        # the decisions' view of the cache: (resource type, pattern type, name) -> the ACLs
        # by principal (a decision reads its principal's and the wildcard principal's only),
        # and per resource type the lengths of its prefixed names (a decision looks up only
        # those prefixes of the resource name)
        self._index: dict[tuple[int, int, str], dict[str, tuple[AccessControlEntry, ...]]] = {}
        self._prefix_lengths: dict[int, tuple[int, ...]] = {}
        self._lock = threading.RLock()
        self._audit = AuditLog(audit_interval_s)
        self._listener = AclChangeListener(
            store, self.process_acl_change_notification, poll_interval_s=change_poll_interval_s
        )

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Create the ACL paths, start the change listener, then load every ACL (listener
        first, as Kafka does, so that no change falls between the load and the listening)."""
        self._store.create_acl_paths()
        self._listener.start()
        with self._lock:
            for pattern_type in STORED_PATTERN_TYPES:
                for type_name in self._store.get_resource_types(pattern_type):
                    resource_type = ResourceType.from_name(type_name)
                    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
                        logger.warning("ignoring unknown ACL resource type %s", type_name)
                        continue
                    names = self._store.get_resource_names(pattern_type, resource_type)
                    for name in names:
                        pattern = ResourcePattern(
                            resource_type=resource_type,
                            name=name,
                            pattern_type=pattern_type,
                        )
                        self._update_cache(pattern, self._read(pattern))
        logger.info("ACL authorizer started resources=%d", len(self._cache))

    def close(self) -> None:
        self._listener.close()

    # --- decisions ----------------------------------------------------------------------------

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        request_name: str,
        actions: Sequence[Action],
    ) -> list[bool]:
        """One answer per action, in order."""
        return [self._authorize_action(principal, host, request_name, a) for a in actions]

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return str(principal) in self.config.super_users

    def _authorize_action(
        self, principal: KafkaPrincipal, host: str, request_name: str, action: Action
    ) -> bool:
        pattern = action.pattern
        if pattern.pattern_type != PatternType.LITERAL:
            raise ValueError(f"only literal resources are authorized, got {pattern}")
        name = str(principal)
        authorized = self.is_super_user(principal)
        if not authorized:
            any_acls, acls = self._matching_acls(pattern, name)
            if any_acls:
                authorized = _acls_allow(acls, host, action.operation)
            else:
                authorized = self.config.allow_everyone_if_no_acl_found
        self._audit.record(principal, host, request_name, action, authorized)
        return authorized

    def _matching_acls(
        self, pattern: ResourcePattern, principal: str
    ) -> tuple[bool, list[AccessControlEntry]]:
        """Whether any ACL matches the resource (its literal name, the type's wildcard, a
        prefix of the name), and those of them for ``principal`` or the wildcard principal."""
        index = self._index  # one snapshot
        resource_type, name = int(pattern.resource_type), pattern.name
        keys = [(resource_type, _LITERAL, name), (resource_type, _LITERAL, WILDCARD_RESOURCE)]
        keys += [
            (resource_type, _PREFIXED, name[:length])
            for length in self._prefix_lengths.get(resource_type, ())
            if length <= len(name)
        ]
        any_acls = False
        acls: list[AccessControlEntry] = []
        for key in keys:
            by_principal = index.get(key)
            if by_principal is None:
                continue
            any_acls = True
            acls.extend(by_principal.get(principal, ()))
            acls.extend(by_principal.get(WILDCARD_PRINCIPAL, ()))
        return any_acls, acls

    def authorize_by_resource_type(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """Whether the principal may do ``operation`` on at least one resource of the type
        (Kafka's ``authorizeByResourceType``, InitProducerId's "WRITE on any topic"): an
        ALLOW on a literal or prefixed pattern that no DENY on the wildcard, on the same
        literal, or on a prefix of it overrides."""
        if self.is_super_user(principal):
            return True
        name = str(principal)
        deny_literals: set[str] = set()
        deny_prefixes: set[str] = set()
        allow_literals: set[str] = set()
        allow_prefixes: set[str] = set()
        for pattern, versioned in self._cache.items():
            if pattern.resource_type != resource_type:
                continue
            for acl in versioned.acls:
                if not _entry_matches(acl, name, host, {operation}):
                    continue
                deny = acl.permission_type == AclPermissionType.DENY
                literal = pattern.pattern_type == PatternType.LITERAL
                target = (
                    (deny_literals if literal else deny_prefixes)
                    if deny
                    else (allow_literals if literal else allow_prefixes)
                )
                target.add(pattern.name)
        if WILDCARD_RESOURCE in deny_literals:
            return False
        if self.config.allow_everyone_if_no_acl_found:
            return True

        def dominant_prefix_deny(resource: str) -> bool:
            return any(resource[:end] in deny_prefixes for end in range(1, len(resource) + 1))

        if any(not dominant_prefix_deny(p) for p in allow_prefixes):
            return True
        return any(
            literal == WILDCARD_RESOURCE
            or (literal not in deny_literals and not dominant_prefix_deny(literal))
            for literal in allow_literals
        )

    # --- ACLs: read and change ---------------------------------------------------------------

    def acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        bindings = []
        for pattern, versioned in sorted(self._cache.items(), key=lambda kv: _pattern_order(kv[0])):
            for acl in sorted(versioned.acls, key=_acl_order):
                binding = AclBinding(pattern=pattern, entry=acl)
                if binding_filter.matches(binding):
                    bindings.append(binding)
        return bindings

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        results: list[AclCreateResult | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for index, binding in enumerate(bindings):
            problem = _validation_problem(binding)
            if problem is not None:
                results[index] = AclCreateResult(
                    error=AclUpdateError("invalid_request", f"Failed to create ACL: {problem}")
                )
                continue
            by_pattern.setdefault(binding.pattern, []).append(index)
        with self._lock:
            for pattern, indexes in by_pattern.items():
                new = frozenset(bindings[i].entry for i in indexes)
                try:
                    self._update_resource_acls(pattern, new.union)
                except AclUpdateError as error:
                    for i in indexes:
                        results[i] = AclCreateResult(error=error)
                    continue
                for i in indexes:
                    results[i] = AclCreateResult()
        return [r if r is not None else AclCreateResult() for r in results]

    def delete_acls(
        self, filters: Sequence[AclBindingFilter]
    ) -> list[list[AclBindingDeleteResult]]:
        """Per filter, the bindings it deleted (a binding two filters match counts for the
        first)."""
        deleted: dict[AclBinding, int] = {}
        errors: dict[AclBinding, AclUpdateError] = {}
        with self._lock:
            resources = set(self._cache)
            for f in filters:
                if f.pattern_filter.matches_at_most_one:
                    resources.update(_filter_to_resources(f.pattern_filter))
            for resource in sorted(resources, key=_pattern_order):
                matching = [
                    (f, i) for i, f in enumerate(filters) if f.pattern_filter.matches(resource)
                ]
                if not matching:
                    continue
                being_deleted: dict[AclBinding, int] = {}

                def remove(
                    current: frozenset[AccessControlEntry],
                    resource: ResourcePattern = resource,
                    matching: list[tuple[AclBindingFilter, int]] = matching,
                    being_deleted: dict[AclBinding, int] = being_deleted,
                ) -> frozenset[AccessControlEntry]:
                    removed = set()
                    for acl in current:
                        for f, i in matching:
                            if f.entry_filter.matches(acl):
                                binding = AclBinding(pattern=resource, entry=acl)
                                deleted.setdefault(binding, i)
                                being_deleted.setdefault(binding, i)
                                removed.add(acl)
                                break
                    return current - removed

                try:
                    self._update_resource_acls(resource, remove)
                except AclUpdateError as error:
                    for binding in being_deleted:
                        errors.setdefault(binding, error)
        out: list[list[AclBindingDeleteResult]] = [[] for _ in filters]
        for binding, index in deleted.items():
            out[index].append(AclBindingDeleteResult(binding=binding, error=errors.get(binding)))
        return out

    def process_acl_change_notification(self, pattern: ResourcePattern) -> None:
        """Another broker (or this one) changed ``pattern``'s ACLs: re-read them."""
        with self._lock:
            versioned = self._read(pattern)
            logger.info(
                "processing ACL change notification resource=%s acls=%d zk_version=%d",
                pattern,
                len(versioned.acls),
                versioned.zk_version,
            )
            self._update_cache(pattern, versioned)

    def _read(self, pattern: ResourcePattern) -> VersionedAcls:
        try:
            return self._store.get_versioned_acls(pattern)
        except AclZnodeError as exc:
            logger.error("ACLs of %s are unreadable, treated as none: %s", pattern, exc)
            return NO_ACLS

    def _update_resource_acls(
        self,
        pattern: ResourcePattern,
        new_acls_of: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]],
    ) -> bool:
        """Kafka's ``updateResourceAcls``: write ``new_acls_of(current)`` conditionally on the
        znode version, retrying on a conflict; then the cache and a change notification.
        True if the ACLs changed."""
        current = self._cache.get(pattern) or self._read(pattern)
        retries = 0
        while True:
            new_acls = new_acls_of(current.acls)
            try:
                if new_acls:
                    if current.exists:
                        ok, version = self._store.conditional_set_acls(
                            pattern, new_acls, current.zk_version
                        )
                    else:
                        ok, version = self._store.create_acls_if_not_exists(pattern, new_acls)
                else:
                    ok, version = self._store.conditional_delete(pattern, current.zk_version), 0
            except Exception as exc:  # the session is gone, ZooKeeper unreachable
                raise AclUpdateError(
                    "unknown_server_error", f"could not write the ACLs of {pattern}: {exc}"
                ) from exc
            if ok:
                break
            retries += 1
            if retries > MAX_UPDATE_RETRIES:
                raise AclUpdateError(
                    "unknown_server_error",
                    f"Failed to update ACLs for {pattern} after trying a maximum of"
                    f" {MAX_UPDATE_RETRIES} times",
                )
            time.sleep((RETRY_BACKOFF_MS + random.randrange(RETRY_BACKOFF_JITTER_MS)) / 1000)
            current = self._read(pattern)
        updated = VersionedAcls(
            acls=new_acls, zk_version=version if new_acls else NO_ACLS.zk_version
        )
        self._update_cache(pattern, updated)
        if new_acls != current.acls:
            logger.info("updated ACLs resource=%s acls=%d", pattern, len(new_acls))
            self._store.create_change_notification(pattern)
            return True
        return False

    def _update_cache(self, pattern: ResourcePattern, versioned: VersionedAcls) -> None:
        cache = dict(self._cache)
        index = dict(self._index)
        key = (int(pattern.resource_type), int(pattern.pattern_type), pattern.name)
        if versioned.acls:
            cache[pattern] = versioned
            by_principal: dict[str, list[AccessControlEntry]] = {}
            for acl in versioned.acls:
                by_principal.setdefault(acl.principal, []).append(acl)
            index[key] = {principal: tuple(acls) for principal, acls in by_principal.items()}
        else:
            cache.pop(pattern, None)
            index.pop(key, None)
        lengths: dict[int, set[int]] = {}
        for resource_type, pattern_type, name in index:
            if pattern_type == _PREFIXED:
                lengths.setdefault(resource_type, set()).add(len(name))
        self._prefix_lengths = {t: tuple(sorted(ls)) for t, ls in lengths.items()}
        self._index = index
        self._cache = cache


def _entry_matches(
    acl: AccessControlEntry, principal: str, host: str, operations: Iterable[AclOperation]
) -> bool:
    return (
        (acl.principal in (principal, WILDCARD_PRINCIPAL))
        and (acl.operation in operations or acl.operation == AclOperation.ALL)
        and (acl.host in (host, WILDCARD_HOST))
    )


def _acls_allow(acls: list[AccessControlEntry], host: str, operation: AclOperation) -> bool:
    """Kafka's decision over the resource's ACLs of the principal (and the wildcard one): a
    matching DENY refuses, else a matching ALLOW (of the operation or one implying it)
    allows."""
    denied_by = frozenset({operation, AclOperation.ALL})
    allowed_by = _IMPLIED.get(operation, frozenset({operation})) | {AclOperation.ALL}
    allowed = False
    for acl in acls:
        if acl.host not in (host, WILDCARD_HOST):
            continue
        if acl.permission_type == AclPermissionType.DENY:
            if acl.operation in denied_by:
                return False
        elif acl.permission_type == AclPermissionType.ALLOW and acl.operation in allowed_by:
            allowed = True
    return allowed


def _validation_problem(binding: AclBinding) -> str | None:
    if binding.is_unknown:
        return "ACL binding contains unknown elements"
    if "/" in binding.pattern.name:
        return f"ACL binding contains invalid resource name: {binding.pattern.name}"
    return None


def _filter_to_resources(pattern_filter: ResourcePatternFilter) -> list[ResourcePattern]:
    assert_name = pattern_filter.name or ""
    types = (
        (PatternType.LITERAL, PatternType.PREFIXED)
        if pattern_filter.pattern_type == PatternType.ANY
        else (pattern_filter.pattern_type,)
    )
    return [
        ResourcePattern(
            resource_type=pattern_filter.resource_type, name=assert_name, pattern_type=t
        )
        for t in types
        if t.is_specific
    ]


def _pattern_order(pattern: ResourcePattern) -> tuple[int, int, str]:
    return (int(pattern.resource_type), int(pattern.pattern_type), pattern.name)


def _acl_order(acl: AccessControlEntry) -> tuple[str, str, int, int]:
    return (acl.principal, acl.host, int(acl.operation), int(acl.permission_type))


def authorizer_from_config(props: Mapping[str, str], session: object) -> AclAuthorizer | None:
    """The broker's authorizer: an ``AclAuthorizer`` over the broker's ZooKeeper session (or
    its single-node store's) when ``authorizer.class.name`` names it, else None. Any other
    class name is refused before (``server.security_config``)."""
    name = props.get("authorizer.class.name", "").strip()
    if not name:
        return None
    if name != ACL_AUTHORIZER_CLASS:
        raise InvalidConfigError(
            f"authorizer.class.name={name} is not an authorizer this broker has: use"
            f" {ACL_AUTHORIZER_CLASS}"
        )
    separate = sorted(k for k, v in props.items() if k.startswith("authorizer.zookeeper.") and v)
    if separate:
        raise InvalidConfigError(
            f"{separate[0]} asks for ACLs in a ZooKeeper of their own, which this broker does not"
            " support: remove it (ACLs are kept in the cluster's zookeeper.connect)"
        )
    return AclAuthorizer(AclZkStore(session), AuthorizerConfig.from_props(props))
