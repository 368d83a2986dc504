#!/usr/bin/env python3
"""translate.py SRC DST — rewrites a .cu file for the CPU emulator (tests/gpu/emu):

  kernel<<<grid, block[, smem[, stream]]>>>(args)
      -> ::emu::launch("kernel", kernel, grid, block, smem, stream, args)
  extern __shared__ [__align__(N)] T name[];
      -> T* name = reinterpret_cast<T*>(::emu::dynamic_smem());
  __noinline__ -> __attribute__((noinline)); and __CUDACC__ is defined, as nvcc does.

Everything else is kept byte for byte and every line keeps its number (a #line directive
names the original file), so compiler errors and backtraces point at the real source.
"""
import re
import sys

IDENT = re.compile(r"[A-Za-z0-9_:]")
OPEN = {")": "(", ">": "<", "]": "["}


def kernel_start(s, end):
    """Index where the kernel expression ending just before `end` starts: identifiers,
    ::, template argument lists and call parentheses, back to the first blank."""
    i = end
    while i > 0:
        c = s[i - 1]
        if IDENT.match(c) or c == ".":
            i -= 1
        elif c in OPEN:
            depth, j = 0, i - 1
            while j >= 0:
                if s[j] == c:
                    depth += 1
                elif s[j] == OPEN[c]:
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            i = j
        else:
            break
    return i


def split_top(text):
    """Splits at commas outside (), [], {}."""
    parts, depth, cur = [], 0, ""
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return [p.strip() for p in parts]


def matching(s, i, open_c, close_c):
    """Index of the bracket closing the one at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_c:
            depth += 1
        elif s[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced %s at offset %d" % (open_c, i))


def translate_launches(s):
    out, pos = [], 0
    while True:
        k = s.find("<<<", pos)
        if k < 0:
            out.append(s[pos:])
            return "".join(out)
        start = kernel_start(s, k)
        kernel = s[start:k]
        cfg_end = s.find(">>>", k)
        cfg = split_top(s[k + 3:cfg_end])
        if len(cfg) < 2 or len(cfg) > 4:
            raise ValueError("launch of %s: expected 2 to 4 configuration values, got %r" % (kernel, cfg))
        while len(cfg) < 4:
            cfg.append("0" if len(cfg) == 2 else "nullptr")
        p = cfg_end + 3
        while s[p].isspace():
            p += 1
        if s[p] != "(":
            raise ValueError("launch of %s: no argument list" % kernel)
        close = matching(s, p, "(", ")")
        args = s[p + 1:close]
        # Newlines inside the configuration are kept, so the line numbers do not move.
        lost = s[k:p].count("\n")
        head = '::emu::launch("%s", %s, %s, %s, size_t(%s), %s' % (kernel.replace('"', ""), kernel, *cfg)
        out.append(s[pos:start])
        out.append(head + ("\n" * lost) + ("," + args if args.strip() else "") + ")")
        pos = close + 1


EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:]*)\s+(?:__align__\(\s*\d+\s*\)\s+)?(\w+)\s*\[\s*\]\s*;")


def translate(src, path):
    s = EXTERN_SHARED.sub(lambda m: "%s* %s = reinterpret_cast<%s*>(::emu::dynamic_smem());" % (m[1], m[2], m[1]), src)
    s = translate_launches(s)
    # A macro cannot do this one: system headers spell __attribute__((__noinline__)).
    s = re.sub(r"\b__noinline__\b", "__attribute__((noinline))", s)
    assert s.count("\n") == src.count("\n"), "translation moved lines in " + path
    # Device-only declarations in headers hide behind __CUDACC__, as they would from g++ on a GPU build.
    return '#define __CUDACC__ 1\n#line 1 "%s"\n' % path + s


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    out = translate(text, src)
    with open(dst, "w") as f:
        f.write(out)


if __name__ == "__main__":
    main()
