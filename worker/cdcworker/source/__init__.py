"""The source side of the pipeline: gRPC channels to VTGate and the VStream reader."""
