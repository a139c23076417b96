//! The bare client (and the fake runtime's server) from podprobe's own
//! `proto/api.proto`, so both sides speak exactly the same messages.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../../proto/api.proto");
    tonic_prost_build::configure().compile_protos(&["../../proto/api.proto"], &["../../proto"])?;
    Ok(())
}
