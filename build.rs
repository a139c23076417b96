//! Generates the CRI v1 client from `proto/api.proto` (needs `protoc`, e.g.
//! Debian's `protobuf-compiler`, or `PROTOC` pointing at one).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure()
        .build_server(false)
        .compile_protos(&["proto/api.proto"], &["proto"])?;
    Ok(())
}
