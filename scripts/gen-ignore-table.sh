#!/usr/bin/env bash
# Writes git's own answers for the search-visibility fixtures into
# tests/fixtures/visibility/table.tsv (or the file given as $1), which
# tests/visibility.rs holds the Rust policy to.
#
# Each tree tests/fixtures/visibility/<tree>/ has `paths` (one file path a
# line, a directory ending in `/`) and ignores/<dir>/gitignore, the text of
# <dir>/.gitignore (stored without the dot so this repository's git does not
# apply it). The tree is built on disk, so git sees which paths are
# directories, and every file and directory goes through
# `git check-ignore --no-index -v -n` with no global or system excludes.
#
# A row: tree, path, is_dir (0/1), ignored (1 when search hides it: a `.git`
# component, an ignored ancestor directory, or git ignores the path itself),
# and git's verdict on the path itself (source:line:pattern, empty for none).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fixtures="$ROOT/tests/fixtures/visibility"
out="${1:-$fixtures/table.tsv}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Only the fixtures' .gitignore files may decide: no user or system config
# (core.excludesFile), no repository from the environment.
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 LC_ALL=C
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT

add_path() { # records $1 (is_dir $2) and every ancestor directory in is_dir
  local path="$1" dir
  is_dir["$path"]="$2"
  dir="$path"
  while [[ "$dir" == */* ]]; do
    dir="${dir%/*}"
    is_dir["$dir"]=1
  done
}

rows="$work/rows"
: >"$rows"
for spec in "$fixtures"/*/; do
  tree="$(basename "$spec")"
  wt="$work/trees/$tree"
  # The repository lives beside the tree so the tree may hold `.git` itself.
  repo="$work/repos/$tree"
  mkdir -p "$wt"
  git init -q "$repo"
  rm -f "$repo/.git/info/exclude"

  declare -A is_dir=()
  while IFS= read -r line || [ -n "$line" ]; do
    if [ -z "$line" ]; then continue; fi
    if [[ "$line" == */ ]]; then
      mkdir -p "$wt/${line%/}"
      add_path "${line%/}" 1
    else
      mkdir -p "$(dirname "$wt/$line")"
      : >"$wt/$line"
      add_path "$line" 0
    fi
  done <"$spec/paths"
  while IFS= read -r -d '' file; do
    rel="${file#"$spec/ignores"}"
    rel="${rel#/}"
    rel="${rel%gitignore}"
    mkdir -p "$wt/$rel"
    cp "$file" "$wt/$rel.gitignore"
    add_path "$rel.gitignore" 0
  done < <(find "$spec/ignores" -type f -name gitignore -print0)

  # git's verdict on each path alone: `source NUL line NUL pattern NUL path NUL`
  # (exit status 1: nothing ignored).
  printf '%s\0' "${!is_dir[@]}" |
    git --git-dir="$repo/.git" --work-tree="$wt" -c core.excludesFile= \
      -C "$wt" check-ignore --no-index -v -n -z --stdin >"$work/answers" ||
    [ $? = 1 ] || { echo "gen-ignore-table: git check-ignore failed on tree $tree" >&2; exit 1; }
  declare -A verdict=() ignored=()
  while IFS= read -r -d '' source && IFS= read -r -d '' lineno &&
    IFS= read -r -d '' pattern && IFS= read -r -d '' path; do
    if [ -n "$pattern" ]; then
      verdict["$path"]="$source:$lineno:$pattern"
      [[ "$pattern" == '!'* ]] || ignored["$path"]=1
    fi
  done <"$work/answers"

  for path in "${!is_dir[@]}"; do
    hidden=0
    if [[ "/$path/" == */.git/* ]] || [ -n "${ignored[$path]:-}" ]; then
      hidden=1
    fi
    dir="$path"
    while [[ "$dir" == */* ]]; do
      dir="${dir%/*}"
      if [ -n "${ignored[$dir]:-}" ]; then hidden=1; fi
    done
    printf '%s\t%s\t%s\t%s\t%s\n' "$tree" "$path" "${is_dir[$path]}" "$hidden" "${verdict[$path]:-}" >>"$rows"
  done
  unset is_dir verdict ignored
done

{
  printf '# tree\tpath\tis_dir\tignored\tgit check-ignore -v (written by scripts/gen-ignore-table.sh)\n'
  sort -t $'\t' -k1,1 -k2,2 "$rows"
} >"$out"
