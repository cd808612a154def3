//! nvmf-common's build script. With the `rdma` feature (Cargo then sets `CARGO_FEATURE_RDMA` and compiles this
//! script with `cfg(feature = "rdma")`, which also brings in the optional build-dependencies) it generates the
//! RDMA verbs and RDMA CM bindings of `transport::rdma::verbs::ffi` from the machine's rdma-core headers, compiles
//! the C shim for verbs.h's inline functions and links libibverbs and librdmacm. Without it there is nothing to
//! do.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "rdma")]
    verbs::build();
}

#[cfg(feature = "rdma")]
mod verbs {
    use std::path::PathBuf;

    /// Where shim.h (the header bindgen reads) and shim.c live.
    const DIR: &str = "src/transport/rdma/verbs";

    /// The libibverbs and librdmacm functions the verbs module calls (exported symbols).
    const FUNCTIONS: &[&str] = &[
        "ibv_ack_cq_events",
        "ibv_alloc_pd",
        "ibv_create_comp_channel",
        "ibv_create_cq",
        "ibv_create_srq",
        "ibv_dealloc_pd",
        "ibv_dereg_mr",
        "ibv_destroy_comp_channel",
        "ibv_destroy_cq",
        "ibv_destroy_srq",
        "ibv_get_cq_event",
        "ibv_get_device_name",
        "ibv_query_device",
        // The exported function: verbs.h's macro of the same name only adds a detour through
        // ibv_reg_mr_iova2 for the IBV_ACCESS_OPTIONAL_RANGE flags, which AccessFlags refuses.
        "ibv_reg_mr",
        "rdma_accept",
        "rdma_ack_cm_event",
        "rdma_bind_addr",
        "rdma_connect",
        "rdma_create_event_channel",
        "rdma_create_id",
        "rdma_create_qp",
        "rdma_destroy_event_channel",
        "rdma_destroy_id",
        "rdma_destroy_qp",
        "rdma_disconnect",
        "rdma_free_devices",
        "rdma_get_cm_event",
        "rdma_get_devices",
        "rdma_listen",
        "rdma_migrate_id",
        "rdma_reject",
        "rdma_resolve_addr",
        "rdma_resolve_route",
    ];

    /// shim.c's exported wrappers of the static inline verbs.h functions the module calls.
    const SHIMMED: &[&str] = &[
        "nvmf_ibv_alloc_mw",
        "nvmf_ibv_dealloc_mw",
        "nvmf_ibv_poll_cq",
        "nvmf_ibv_post_recv",
        "nvmf_ibv_post_send",
        "nvmf_ibv_post_srq_recv",
        "nvmf_ibv_req_notify_cq",
    ];

    /// Structs the module builds or reads (what the functions take comes along anyway).
    const TYPES: &[&str] = &[
        "ibv_device",
        "ibv_device_attr",
        "ibv_mw_bind_info",
        "ibv_qp_cap",
        "ibv_qp_init_attr",
        "ibv_recv_wr",
        "ibv_send_wr",
        "ibv_sge",
        "ibv_srq_init_attr",
        "ibv_wc",
        "rdma_cm_event",
        "rdma_conn_param",
    ];

    /// Enums the module reads and writes as plain integers: `name::Type` (a `c_uint`) and one constant per value.
    const INTEGER_ENUMS: &[&str] = &[
        "ibv_mw_type",
        "ibv_node_type",
        "ibv_qp_type",
        "ibv_transport_type",
        "ibv_wc_opcode",
        "ibv_wc_status",
        "ibv_wr_opcode",
        "rdma_cm_event_type",
        "rdma_port_space",
    ];

    /// Flag enums: a newtype over the `c_uint` with one associated constant per bit.
    const FLAG_ENUMS: &[&str] = &["ibv_access_flags", "ibv_device_cap_flags", "ibv_send_flags", "ibv_wc_flags"];

    /// Types the module never looks into: an opaque blob of the right size and alignment instead of their fields
    /// (and of everything those fields name). The provider's ops table is only called through shim.c.
    const OPAQUE: &[&str] = &["ibv_ah", "ibv_ah_attr", "ibv_context_ops", "ibv_sa_path_rec"];

    /// libc's types (the module builds socket addresses with libc): ffi.rs imports them, all `Copy`.
    const FROM_LIBC: &[&str] =
        &["pthread_cond_t", "pthread_mutex_t", "sockaddr", "sockaddr_in", "sockaddr_in6", "sockaddr_storage"];

    /// What only the libc types above contain.
    const UNUSED: &[&str] =
        &["__atomic_wide_counter.*", "__pthread_.*", "in6?_addr.*", "in_addr_t", "in_port_t", "sa_family_t"];

    /// Tells bindgen that the libc types it does not generate are `Copy`, so that the unions holding them (the
    /// source and destination address of `rdma_addr`) are plain Rust unions.
    #[derive(Debug)]
    struct LibcTypesAreCopy;

    impl bindgen::callbacks::ParseCallbacks for LibcTypesAreCopy {
        fn blocklisted_type_implements_trait(
            &self,
            name: &str,
            derive_trait: bindgen::callbacks::DeriveTrait,
        ) -> Option<bindgen::callbacks::ImplementsTrait> {
            // Struct names come as `struct sockaddr`, typedefs as they are.
            let name = name.strip_prefix("struct ").unwrap_or(name);
            (FROM_LIBC.contains(&name) && derive_trait == bindgen::callbacks::DeriveTrait::Copy)
                .then_some(bindgen::callbacks::ImplementsTrait::Yes)
        }
    }

    /// A library's build flags, from pkg-config or (without it) the plain names.
    struct Lib {
        include_paths: Vec<PathBuf>,
        link_paths: Vec<PathBuf>,
        libs: Vec<String>,
    }

    fn probe(package: &str, fallback: &str) -> Lib {
        match pkg_config::Config::new().cargo_metadata(false).probe(package) {
            Ok(l) => Lib { include_paths: l.include_paths, link_paths: l.link_paths, libs: l.libs },
            Err(e) => {
                println!("cargo:warning=pkg-config found no {package} ({e}); linking -l{fallback}");
                Lib { include_paths: Vec::new(), link_paths: Vec::new(), libs: vec![fallback.to_owned()] }
            }
        }
    }

    pub fn build() {
        let header = format!("{DIR}/shim.h");
        let shim = format!("{DIR}/shim.c");
        println!("cargo:rerun-if-changed={header}");
        println!("cargo:rerun-if-changed={shim}");
        // The bindings are what this libclang made of the headers.
        println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");

        let libs = [probe("libibverbs", "ibverbs"), probe("librdmacm", "rdmacm")];
        let includes: Vec<&PathBuf> = libs.iter().flat_map(|l| &l.include_paths).collect();

        // The shim first, then the libraries it calls into.
        cc::Build::new().file(&shim).includes(&includes).compile("nvmf_verbs_shim");
        for lib in &libs {
            for path in &lib.link_paths {
                println!("cargo:rustc-link-search=native={}", path.display());
            }
            for name in &lib.libs {
                println!("cargo:rustc-link-lib={name}");
            }
        }

        // The workspace's rust-version: nothing newer in the generated code.
        let target = bindgen::RustTarget::stable(85, 0).expect("bindgen knows Rust 1.85");
        let mut builder = bindgen::Builder::default()
            .header(&header)
            .clang_args(includes.iter().map(|p| format!("-I{}", p.display())))
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
            .parse_callbacks(Box::new(LibcTypesAreCopy))
            .rust_target(target)
            .rust_edition(bindgen::RustEdition::Edition2021)
            .layout_tests(false)
            .derive_debug(false)
            .generate_comments(false)
            .wrap_unsafe_ops(true)
            .merge_extern_blocks(true);
        for f in FUNCTIONS.iter().chain(SHIMMED) {
            builder = builder.allowlist_function(f);
        }
        for t in TYPES.iter().chain(INTEGER_ENUMS).chain(FLAG_ENUMS) {
            builder = builder.allowlist_type(t);
        }
        for e in INTEGER_ENUMS {
            builder = builder.constified_enum_module(e);
        }
        for e in FLAG_ENUMS {
            builder = builder.bitfield_enum(e);
        }
        for t in OPAQUE {
            builder = builder.opaque_type(t);
        }
        for t in FROM_LIBC.iter().chain(UNUSED) {
            builder = builder.blocklist_type(t);
        }
        let bindings =
            builder.generate().expect("bindgen failed on rdma-core's headers (libibverbs-dev, librdmacm-dev)");
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("verbs.rs");
        bindings.write_to_file(&out).expect("writing the verbs bindings to OUT_DIR");
    }
}
