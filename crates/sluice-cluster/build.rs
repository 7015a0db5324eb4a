//! Compiles `proto/node.proto` with protox (pure Rust: no `protoc` on the machine) and
//! generates the tonic client and server from the descriptor set.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/node.proto");
    let fds = protox::compile(["proto/node.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
