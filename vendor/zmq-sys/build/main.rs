//! Tidemark's build of libzmq (see vendor/README.md): the vendored source,
//! as upstream zmq-sys 0.12 builds it, but linked with libsodium (itself
//! built from the source `libsodium-sys-stable` bundles), so CURVE works.
//! Upstream passes `None` here, which builds libzmq without CURVE.

pub fn configure() {
    println!("cargo:rerun-if-changed=build/main.rs");
    println!("cargo:rerun-if-env-changed=PROFILE");
    let dir = |key: &str| {
        std::path::PathBuf::from(
            std::env::var(key)
                .unwrap_or_else(|_| panic!("{} is set by the build of libsodium-sys-stable", key)),
        )
    };
    let sodium = zeromq_src::LibLocation::new(dir("DEP_SODIUM_LIB"), dir("DEP_SODIUM_INCLUDE"));
    zeromq_src::Build::new().with_libsodium(Some(sodium)).build();
}

fn main() {
    configure()
}
