#!/usr/bin/env python3
"""Builds the storage scripts into one versioned Redis Functions library and embeds it.

The code every queue script shares is split into modules, scripts/common/<module>.lua, in the
order of scripts/common/modules.txt (each may use what the ones before it define: they are one
chunk of Lua once joined). Every script file holds a placeholder for that code:
    -- BEGIN common
    -- END common
The library is the modules once, in order, then each script's body as a function of (KEYS,
ARGV) that first binds the queue's keys (common/keys.lua `bind`), registered as
`dq_<version>_<name>`. Redis compiles the shared code once per FUNCTION LOAD instead of once per
call, which is what an EVALSHA body with the shared code inlined paid for on every call.

The version is derived from the sources (SHA-1 of the shared code and every script, first 10 hex
digits), so a changed script is a new library `deferq_<version>` with new function names: two
deferq builds on one Redis (a rolling upgrade) each call their own functions.

The scripts are listed once, in scripts/list.txt; everything else is generated from it or
reads it (script_names):

  embed_scripts.py OUT.cc LIST COMMON_DIR NAME=FILE.lua ... write the C++ source embedding it
  embed_scripts.py --header OUT.h LIST                      write the Script enum and its names
  embed_scripts.py --library SCRIPTS_DIR                    print the library of the listed scripts
  embed_scripts.py --library COMMON_DIR NAME=FILE.lua ...   print the library of those scripts
  embed_scripts.py --names LIST                             print the listed names, one a line
"""
import hashlib
import os
import re
import sys

BEGIN, END = '-- BEGIN common', '-- END common'
PLACEHOLDER = re.compile(re.escape(BEGIN) + r'.*?' + re.escape(END) + r'\n', re.DOTALL)


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


FLAGS = ('no-writes', 'allow-oom', 'allow-cross-slot-keys')


def common_modules(common_dir):
    """The shared modules' names, in the order of COMMON_DIR/modules.txt."""
    return [n for n in read(os.path.join(common_dir, 'modules.txt')).split() if n]


def read_common(common_dir):
    """The code every queue script shares: the modules of COMMON_DIR, joined in order."""
    return ''.join(read(os.path.join(common_dir, n + '.lua')) for n in common_modules(common_dir))


def script_entries(list_path):
    """[(name, standalone, flags, body)] in the order of scripts/list.txt: the function's name,
    whether its file shares no common code, its Redis function flags (a tuple of FLAGS) and
    the script whose body it runs (its own name, or OTHER of a `body=OTHER` word: the same code
    registered once more under other flags)."""
    out, bodies = [], {}
    for line in read(list_path).splitlines():
        words = line.split('#', 1)[0].split()
        if not words:
            continue
        name, rest = words[0], words[1:]
        standalone = 'standalone' in rest
        flags = tuple(w for w in rest if w in FLAGS)
        body = [w[len('body='):] for w in rest if w.startswith('body=')]
        known = len(flags) + len(body) + (1 if standalone else 0)
        if (not re.fullmatch(r'[a-z][a-z0-9_]*', name) or known != len(rest) or len(body) > 1
                or len(set(rest)) != len(rest) or (body and (standalone or body[0] not in bodies))):
            sys.exit(f'{list_path}: bad line: {line!r}')
        if body:
            body, standalone = body[0], bodies[body[0]]
        else:
            body = name
            bodies[name] = standalone
        out.append((name, standalone, flags, body))
    return out


def script_list(list_path):
    """[(name, standalone)] of the script files, in the order of scripts/list.txt (a function
    that runs another script's body is not a file of its own)."""
    return [(name, standalone) for name, standalone, _, body in script_entries(list_path)
            if body == name]


def script_names(list_path):
    """Every function's name, in the order of scripts/list.txt (persist::Script)."""
    return [name for name, _, _, _ in script_entries(list_path)]


def library_of_dir(scripts_dir):
    """(version, library text) of every script listed in SCRIPTS_DIR/list.txt."""
    list_path = os.path.join(scripts_dir, 'list.txt')
    files = [name for name, _ in script_list(list_path)]
    return library(os.path.join(scripts_dir, 'common'),
                   [(n, os.path.join(scripts_dir, n + '.lua')) for n in files],
                   script_entries(list_path))


def header(list_path):
    """persist/script_list.h: the Script enum in list order, each function's name and whether it
    is registered no-writes."""
    entries = script_entries(list_path)
    names = [name for name, _, _, _ in entries]
    enum = ''.join(f'  k{n.title().replace("_", "")},\n' for n in names)
    quoted = ', '.join(f'"{n}"' for n in names)
    bits = ', '.join(' | '.join(['kNoWrites'] * ('no-writes' in flags) + ['kAllowOom'] * ('allow-oom' in flags)) or '0'
                     for _, _, flags, _ in entries)
    return ('// Generated by src/persist/embed_scripts.py from src/persist/scripts/list.txt. '
            'Do not edit.\n'
            '#pragma once\n\n#include <cstddef>\n#include <iterator>\n#include <string_view>\n\nnamespace deferq::persist {\n\n'
            f'enum class Script {{\n{enum}  kCount,\n}};\n\n'
            '// Each script\'s name, in the order of Script: its file is <name>.lua.\n'
            f'inline constexpr std::string_view kScriptNames[] = {{{quoted}}};\n'
            'static_assert(std::size(kScriptNames) == static_cast<size_t>(Script::kCount));\n\n'
            '// Each function\'s Redis flags: kNoWrites (a read: it runs at maxmemory, under MISCONF,\n'
            '// and while a pool refuses writes), kAllowOom (it frees or keeps memory: it runs at\n'
            '// maxmemory). A function with neither is refused at maxmemory (-OOM).\n'
            'inline constexpr unsigned kNoWrites = 1, kAllowOom = 2;\n'
            f'inline constexpr unsigned kScriptFlags[] = {{{bits}}};\n'
            'static_assert(std::size(kScriptFlags) == static_cast<size_t>(Script::kCount));\n\n'
            '}  // namespace deferq::persist\n')


def library(common_dir, pairs, entries=None):
    """(version, library text) for the shared modules of COMMON_DIR and the (name, path) script
    files; `entries`
    (script_entries) says which functions to register and with which flags: by default one per
    file, without flags."""
    common = read_common(common_dir)
    scripts = [(name, read(path)) for name, path in pairs]
    if entries is None:
        entries = [(name, False, (), name) for name, _ in pairs]
    digest = hashlib.sha1(common.encode())
    for name, text in scripts:
        digest.update(name.encode() + b'\0' + text.encode())
    for name, _, flags, body in entries:
        digest.update(('%s %s %s' % (name, ','.join(flags), body)).encode() + b'\0')
    version = digest.hexdigest()[:10]
    out = [f'#!lua name=deferq_{version}',
           '-- Generated by src/persist/embed_scripts.py from src/persist/scripts/*.lua.', '',
           common]
    for name, text in scripts:
        body, n = PLACEHOLDER.subn('', text)
        if n > 1:
            sys.exit(f'{name}: more than one common placeholder')
        # A script that shares no common code binds no queue keys (it may have none).
        bind = ['bind(KEYS)'] if n == 1 else []
        out += [f'local function script_{name}(KEYS, ARGV)'] + bind + [body, 'end', '']
    for name, _, flags, body in entries:
        # Entered from Redis, a script first drops any batch state an aborted call left behind.
        # Flags (Redis Functions): no-writes lets a read run at maxmemory and while Redis cannot
        # persist (MISCONF); allow-oom lets a call that frees or keeps memory run at maxmemory.
        quoted = ', '.join(f"'{f}'" for f in flags)
        out.append(f"redis.register_function{{function_name = 'dq_{version}_{name}', "
                   f"callback = function(KEYS, ARGV) call_begin() return script_{body}(KEYS, ARGV) "
                   f"end, flags = {{{quoted}}}}}")
    return version, '\n'.join(out) + '\n'


def main(argv):
    if len(argv) == 3 and argv[1] == '--library' and os.path.isdir(argv[2]):
        sys.stdout.write(library_of_dir(argv[2])[1])
        return
    if len(argv) >= 3 and argv[1] == '--library':
        sys.stdout.write(library(argv[2], [p.split('=', 1) for p in argv[3:]])[1])
        return
    if len(argv) == 3 and argv[1] == '--names':
        sys.stdout.write(''.join(n + '\n' for n in script_names(argv[2])))
        return
    if len(argv) == 4 and argv[1] == '--header':
        with open(argv[2], 'w', encoding='utf-8') as f:
            f.write(header(argv[3]))
        return
    out, list_path, common = argv[1], argv[2], argv[3]
    pairs = [p.split('=', 1) for p in argv[4:]]
    version, body = library(common, pairs, script_entries(list_path))
    if ')lua"' in body:
        sys.exit('a script contains the raw-string terminator')
    lines = ['// Generated by src/persist/embed_scripts.py from src/persist/scripts/*.lua. Do not edit.',
             '#include <string_view>', '', 'namespace deferq::persist {', '',
             f'extern const std::string_view kLibraryVersion = "{version}";',
             # A raw string literal may be at most 64 KiB on some compilers: split it.
             'extern const std::string_view kLibraryBody =']
    for i in range(0, len(body), 16000):
        lines.append(f'    R"lua({body[i:i + 16000]})lua"')
    lines[-1] += ';'
    lines += ['', '}  // namespace deferq::persist', '']
    with open(out, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines))


if __name__ == '__main__':
    main(sys.argv)
