"""Generated protobuf modules (scripts/gen_proto.py). Do not edit by hand."""
