#!/usr/bin/env bash
# Builds the Kubernetes API server and etcd the ingress tests run against, once: neither is
# packaged in a version that works together (Debian's etcd 3.4 lacks the watch progress
# requests kube-apiserver 1.3x sends). Both come from the Go module proxy as sources and are
# built here; the binaries are kept in $PORTCULLIS_K8S_CACHE (default ~/.cache/portcullis-k8s)
# and built again only when missing.
#
# The Gateway API's CRDs come from the same proxy, as the sigs.k8s.io/gateway-api module's
# YAML; they are kept in $PORTCULLIS_K8S_CACHE/crds. Helm, which renders the chart the tests
# check, is built the same way.
#
# Usage: crates/ingress/cluster/build.sh        prints the directory holding the binaries
set -euo pipefail

readonly KUBERNETES=v1.34.4 ETCD=v3.6.16 GATEWAY_API=v1.4.1 HELM=v3.22.0
cache=${PORTCULLIS_K8S_CACHE:-$HOME/.cache/portcullis-k8s}
bin=$cache/bin
mkdir -p "$bin"

# Builds the command PACKAGE of a module at VERSION as $bin/NAME: build_command NAME PACKAGE VERSION
build_command() {
    local name=$1 package=$2 version=$3
    local work=$cache/$name-$version
    mkdir -p "$work"
    cd "$work"
    [[ -f go.mod ]] || go mod init "portcullis.test/$name" > /dev/null 2>&1
    go get "$package@$version" > /dev/null 2>&1
    go build -o "$bin/$name.new" "$package"
    mv "$bin/$name.new" "$bin/$name"
}

# k8s.io/kubernetes replaces each of its staging modules with a directory of its own tree;
# outside it, each must be replaced by its published version (v0.<minor>.<patch>).
build_apiserver() {
    local work=$cache/kubernetes-$KUBERNETES
    local staging=v0.${KUBERNETES#v1.}
    mkdir -p "$work"
    cd "$work"
    rm -f go.mod go.sum
    go mod init portcullis.test/kubernetes > /dev/null 2>&1
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
    {
        echo "require k8s.io/kubernetes $KUBERNETES"
        sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => \./staging/.*#replace \1 => \1 '"$staging"'#p' "$gomod"
    } >> go.mod
    go mod tidy > /dev/null 2>&1 || true
    go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBERNETES" > /dev/null 2>&1 || true
    go build -o "$bin/kube-apiserver.new" k8s.io/kubernetes/cmd/kube-apiserver
    mv "$bin/kube-apiserver.new" "$bin/kube-apiserver"
}

# The standard channel's CRDs of the Gateway API.
fetch_gateway_api() {
    local work=$cache/gateway-api-$GATEWAY_API
    mkdir -p "$work"
    cd "$work"
    [[ -f go.mod ]] || go mod init portcullis.test/gateway-api > /dev/null 2>&1
    local dir
    dir=$(go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    mkdir -p "$cache/crds.new"
    cp "$dir"/config/crd/standard/*.yaml "$cache/crds.new/"
    chmod u+w "$cache"/crds.new/*
    rm -rf "$cache/crds"
    mv "$cache/crds.new" "$cache/crds"
}

[[ -x $bin/etcd ]] || (build_command etcd go.etcd.io/etcd/server/v3 "$ETCD") >&2
[[ -x $bin/kube-apiserver ]] || (build_apiserver) >&2
[[ -f $cache/crds/gateway.networking.k8s.io_httproutes.yaml ]] || (fetch_gateway_api) >&2
[[ -x $bin/helm ]] || (build_command helm helm.sh/helm/v3/cmd/helm "$HELM") >&2
echo "$bin"
