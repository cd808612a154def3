//! nvmf-target's build script. With the `rbd` feature it generates the librbd and librados bindings of
//! `backend::rbd::ffi` from the machine's Ceph headers (librbd-dev, librados-dev) and links both libraries.
//! Without it there is nothing to do.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "rbd")]
    rbd::build();
}

#[cfg(feature = "rbd")]
mod rbd {
    use std::path::PathBuf;

    /// The librados and librbd functions the rbd module calls.
    const FUNCTIONS: &[&str] = &[
        "rados_conf_get",
        "rados_conf_read_file",
        "rados_conf_set",
        "rados_connect",
        "rados_create",
        "rados_ioctx_create",
        "rados_ioctx_destroy",
        "rados_ioctx_set_namespace",
        "rados_shutdown",
        "rbd_aio_compare_and_write",
        "rbd_aio_create_completion",
        "rbd_aio_discard",
        "rbd_aio_flush",
        "rbd_aio_get_return_value",
        "rbd_aio_read",
        "rbd_aio_release",
        "rbd_aio_write",
        "rbd_aio_write_zeroes",
        "rbd_close",
        "rbd_get_size",
        "rbd_open",
        "rbd_update_unwatch",
        "rbd_update_watch",
    ];

    pub fn build() {
        // The bindings are what this libclang made of the headers.
        println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
        println!("cargo:rustc-link-lib=rbd");
        println!("cargo:rustc-link-lib=rados");
        // The workspace's rust-version: nothing newer in the generated code.
        let target = bindgen::RustTarget::stable(85, 0).expect("bindgen knows Rust 1.85");
        let mut builder = bindgen::Builder::default()
            .header_contents("nvmf_rbd.h", "#include <rbd/librbd.h>\n")
            .rust_target(target)
            .rust_edition(bindgen::RustEdition::Edition2021)
            .layout_tests(false)
            .derive_debug(false)
            .generate_comments(false)
            .wrap_unsafe_ops(true)
            .merge_extern_blocks(true);
        for f in FUNCTIONS {
            builder = builder.allowlist_function(f);
        }
        let bindings = builder.generate().expect("bindgen failed on Ceph's headers (librbd-dev, librados-dev)");
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("rbd.rs");
        bindings.write_to_file(&out).expect("writing the rbd bindings to OUT_DIR");
    }
}
