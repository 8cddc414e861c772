# The activation algorithm, written once in Python. The .xsh scripts include this file
# verbatim; envfactory's tests run it directly as the reference the other shells must match.
# The awk, cmd and PowerShell versions follow it step by step (same state variables).
# Keep it dependency-free: it runs inside whatever Python xonsh runs on.


def _efy_level(env):
    level = env.get("CONDA_SHLVL", "")
    return level if level.isdigit() else "0"


def _efy_glob(text, pattern):
    """``*``-only glob match (``*`` also matches the separator, like ``case`` in sh)."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return text == pattern
    head, tail, middle = parts[0], parts[-1], parts[1:-1]
    if len(text) < len(head) + len(tail) or not text.startswith(head):
        return False
    if tail and not text.endswith(tail):
        return False
    rest = text[len(head) : len(text) - len(tail)]
    for piece in middle:
        at = rest.find(piece)
        if at < 0:
            return False
        rest = rest[at + len(piece) :]
    return True


def _efy_resolve(value, prefix, plan):
    kind, text = value
    if kind == "literal":
        return text
    return prefix + plan["dirsep"] + text if text else prefix


def _efy_foreign(entry, prefix, plan, is_dir):
    fold = plan["fold_case"]
    trimmed = entry[:-1] if len(entry) > 1 and entry.endswith(plan["dirsep"]) else entry
    probe = trimmed.lower() if fold else trimmed
    for pattern in plan["patterns"]:
        if _efy_glob(probe, pattern.lower() if fold else pattern):
            return True
    suffix = plan["env_lib_suffix"]
    if suffix and probe.endswith(suffix.lower() if fold else suffix):
        base = trimmed[: len(trimmed) - len(suffix)]
        own = prefix[:-1] if len(prefix) > 1 and prefix.endswith(plan["dirsep"]) else prefix
        same = base.lower() == own.lower() if fold else base == own
        if base and not same and is_dir(base + plan["dirsep"] + "conda-meta"):
            return True
    return False


def _efy_split(value, sep):
    return [] if not value else value.split(sep)


def envfactory_deactivate(env, plan):
    """Undo what the activation at this CONDA_SHLVL recorded; return {name: value or None}."""
    sep = plan["sep"]
    key = "_ENVFACTORY_" + _efy_level(env) + "_"
    if key + "COMBO" not in env:
        return {}
    work = dict(env)
    changes = {}

    def put(name, value):
        changes[name] = value
        if value is None:
            work.pop(name, None)
        else:
            work[name] = value

    for name in work.get(key + "LISTS", "").split():
        base = key + name + "_"
        was = work.get(base + "WAS", "set")
        entries = _efy_split(work.get(name), sep)
        if work.get(name) == "" and work.get(base + "LEFT") == "one-empty":
            entries = [""]  # activation left one empty entry, which joins to ""
        for i in range(int(work.get(base + "ADDED", "0"))):
            added = work.get(base + "ADDED_" + str(i), "")
            if added in entries:
                entries.remove(added)
        for i in range(int(work.get(base + "REMOVED", "0"))):
            value = work.get(base + "REMOVED_" + str(i), "")
            occ = work.get(base + "OCC_" + str(i), "end")
            at = len(entries)
            if occ != "end":
                anchor, want, seen = work.get(base + "ANCHOR_" + str(i), ""), int(occ), 0
                for j in range(len(entries) - 1, -1, -1):
                    if entries[j] == anchor:
                        if seen == want:
                            at = j
                            break
                        seen += 1
            entries.insert(at, value)
        if entries:
            put(name, sep.join(entries))
        else:
            put(name, None if was == "unset" else "")
    for name in work.get(key + "VARS", "").split():
        base = key + name + "_"
        current, new = work.get(name), work.get(base + "NEW")
        if current == new:  # still what activation left there: give back the old value
            put(name, work.get(base + "OLD"))
    for name in sorted(work):
        if name.startswith(key):
            put(name, None)
    return changes


def envfactory_activate(env, plan, is_dir):
    """Apply ``plan`` to ``env``; return {name: value or None} (None: unset)."""
    changes = envfactory_deactivate(env, plan)  # reactivation: undo this level's edits first
    work = dict(env)
    for name, value in changes.items():
        if value is None:
            work.pop(name, None)
        else:
            work[name] = value
    sep, prefix = plan["sep"], work.get("CONDA_PREFIX", "")
    key = "_ENVFACTORY_" + _efy_level(work) + "_"
    state = {key + "COMBO": plan["combo"]}
    lists = []
    for name, prepend in plan["lists"]:
        base = key + name + "_"
        lists.append(name)
        current = work.get(name)
        state[base + "WAS"] = "unset" if current is None else "empty" if current == "" else "set"
        kept, removed = [], []
        for entry in _efy_split(current, sep):
            if _efy_foreign(entry, prefix, plan, is_dir):
                removed.append((entry, len(kept)))
            else:
                kept.append(entry)
        for i, (entry, follower) in enumerate(removed):
            state[base + "REMOVED_" + str(i)] = entry
            if follower < len(kept):
                anchor = kept[follower]
                state[base + "ANCHOR_" + str(i)] = anchor
                state[base + "OCC_" + str(i)] = str(kept[follower + 1 :].count(anchor))
            else:
                state[base + "OCC_" + str(i)] = "end"
        state[base + "REMOVED"] = str(len(removed))
        added = [_efy_resolve(value, prefix, plan) for value in prepend]
        for i, entry in enumerate(added):
            state[base + "ADDED_" + str(i)] = entry
        state[base + "ADDED"] = str(len(added))
        entries = added + kept
        if entries == [""]:
            state[base + "LEFT"] = "one-empty"
        if entries:
            changes[name] = sep.join(entries)
        elif current is not None:
            changes[name] = None
    state[key + "LISTS"] = " ".join(lists)
    targets = {name: _efy_resolve(value, prefix, plan) for name, value in plan["set"]}
    for name in plan["unset"]:
        targets[name] = None
    for name in sorted(work):
        if any(name.startswith(p) for p in plan["unset_prefixes"]):
            targets[name] = None
    touched = []
    for name in sorted(targets):
        old, new = work.get(name), targets[name]
        if old == new:
            continue
        touched.append(name)
        if old is not None:
            state[key + name + "_OLD"] = old
        if new is not None:
            state[key + name + "_NEW"] = new
        changes[name] = new
    state[key + "VARS"] = " ".join(touched)
    changes.update(state)
    return changes
