#!/usr/bin/env bash
# Generate Python protobuf + gRPC code for the Vitess API subset in proto/vitessapi.
# Usage: gen-proto.sh <python> <out-dir>
set -euo pipefail
py=$1
out=$2
mkdir -p "$out/vitessapi"
shopt -s nullglob
protos=(proto/vitessapi/*.proto)
if (( ${#protos[@]} )); then
  "$py" -m grpc_tools.protoc -I proto --python_out="$out" --grpc_python_out="$out" --pyi_out="$out" "${protos[@]}"
fi
echo '"""Generated Vitess protobuf/gRPC code (do not edit; made by make proto)."""' > "$out/vitessapi/__init__.py"
echo "generated ${#protos[@]} proto files into $out/vitessapi"
