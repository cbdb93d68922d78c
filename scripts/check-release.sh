#!/usr/bin/env bash
# Refuses to release an overlay that still names the all-zero placeholder digest: the committed
# overlays are templates, and their release/kustomization.yaml carries that placeholder until
# step 1 of docs/kubernetes.md sets the digest the registry printed. Run before applying:
#   scripts/check-release.sh deploy/kubernetes/overlays/production
# Renders the overlay and its migrate/ directory and exits 1, naming each image, if any image is
# unpinned or pinned to the placeholder. scripts/check-deploy.sh runs it on the committed
# production overlay (it must refuse) and on a copy with a digest set (it must accept).
set -euo pipefail
OVERLAY="${1:?usage: check-release.sh OVERLAY_DIRECTORY}"
KUBECTL="${KUBECTL:-kubectl}"
PLACEHOLDER="sha256:0000000000000000000000000000000000000000000000000000000000000000"
status=0
for directory in "$OVERLAY" "$OVERLAY/migrate"; do
  [[ -d "$directory" ]] || continue
  while read -r image; do
    if [[ "$image" == *"@$PLACEHOLDER" ]]; then
      echo "$directory: $image is the placeholder digest: set the release's digest (docs/kubernetes.md, step 1)" >&2
      status=1
    elif [[ "$image" != *@sha256:* ]]; then
      echo "$directory: $image is not pinned by digest" >&2
      status=1
    fi
  done < <("$KUBECTL" kustomize "$directory" | sed -n 's/^ *image: *//p' | tr -d '"' | sort -u)
done
[[ $status == 0 ]] && echo "ok: every image of $OVERLAY is pinned to a release's digest"
exit "$status"
