//! Admin commands answered from the model into byte buffers: Identify (CNS 00h–03h), Get Log Page (error,
//! SMART, firmware slot, changed namespace list, commands supported and effects, ANA, reservation notification,
//! discovery) and Get/Set Features (volatile write cache, number of queues, asynchronous event configuration,
//! keep-alive timer, host identifier, reservation notification mask, reservation persistence).
//!
//! Runs on the reactor owning the admin queue; it takes the controller's mutex (never contended by the data
//! path) and may allocate (discovery log). Statuses follow NVMe Base 2.0 and, where the spec leaves room, what
//! Linux nvmet answers.

use nvmf_common::fabrics::discovery::TransportType;
use nvmf_common::nvme::features::{
    fid, Feature, GetFeatures, NumberOfQueues, Select, SetFeatures, SupportedCapabilities, VolatileWriteCache,
};
use nvmf_common::nvme::identify::{
    cns, ActiveNamespaceIdList, Identify, IdentifyController, IdentifyNamespace, LbaFormat,
    NamespaceIdentificationDescriptor, IDENTIFY_DATA_SIZE, NSID_BROADCAST,
};
use nvmf_common::nvme::log_page::{
    copy_log_page_range, lid, AnaGroupDescriptor, AnaLog, ChangedNamespaceList, CommandsSupportedAndEffects,
    ErrorInformationEntry, GetLogPage, SmartLog, ANA_RGO, CHANGED_NAMESPACE_LIST_SIZE, ERROR_INFORMATION_ENTRY_SIZE,
};
use nvmf_common::nvme::opcode::{admin as admin_op, io as io_op};
use nvmf_common::nvme::reservation::NOTIFICATION_MASK_ALL;
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

use super::ana::{ANACAP, ANAGRPMAX, ANATT_SECONDS, DEFAULT_ANA_GROUP};
use super::association::{Controller, EventKind, AERL, ELPE, VERSION};
use super::discovery::discovery_log_page;
use super::subsystem::{Namespace, NamespaceTable};
use super::target::{Target, TransportInfo};

/// Firmware Revision (Identify FR, firmware slot 1): the crate version, at most 8 characters.
const FIRMWARE_REVISION: &str = {
    let v = env!("CARGO_PKG_VERSION");
    if v.len() <= 8 {
        v
    } else {
        "nvmf-rs"
    }
};

/// DLFEAT bits 2:0 = 001b: deallocated logical blocks read as zeros.
const DLFEAT_READ_ZEROES: u8 = 0b001;
/// DLFEAT bit 3: Write Zeroes supports the Deallocate bit.
const DLFEAT_WRITE_ZEROES_DEALLOCATE: u8 = 1 << 3;

/// Identify Namespace RESCAP: Persist Through Power Loss (bit 0), the six reservation types (bits 6:1) and
/// Ignore Existing Key as NVMe 1.3 defines it (bit 7).
const RESCAP_ALL: u8 = 0xff;

/// Size of the Firmware Slot Information log (Base 2.0 Figure 209).
const FIRMWARE_SLOT_LOG_SIZE: usize = 512;

/// What admin handlers read: the target, the controller, the connection and the namespace table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdminContext<'a> {
    pub(crate) target: &'a Target,
    pub(crate) controller: &'a Controller,
    pub(crate) transport: &'a TransportInfo,
    pub(crate) table: &'a NamespaceTable,
}

fn invalid_field() -> Status {
    Status::INVALID_FIELD.with_dnr()
}

/// Bytes an admin command sends to the host, given the length its SGL describes; `None` for a command
/// without controller-to-host data.
pub(crate) fn output_len(
    ctx: &AdminContext<'_>,
    sqe: &SubmissionQueueEntry,
    sgl_len: u32,
) -> Result<Option<u32>, Status> {
    let need = match sqe.opcode {
        // Hosts ask for the whole 4096 bytes; a shorter SGL gets the start of the structure (as SPDK does).
        admin_op::IDENTIFY => {
            if sgl_len == 0 {
                return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
            }
            return Ok(Some(sgl_len.min(u32::try_from(IDENTIFY_DATA_SIZE).unwrap_or(u32::MAX))));
        }
        admin_op::GET_LOG_PAGE => {
            let glp = GetLogPage::from_sqe(sqe).map_err(|_| invalid_field())?;
            let len = glp.length_bytes();
            if len > u64::from(ctx.target.params().mdts) {
                return Err(invalid_field());
            }
            u32::try_from(len).map_err(|_| invalid_field())?
        }
        admin_op::GET_FEATURES if sqe.cdw10 & 0xff == u32::from(fid::HOST_IDENTIFIER) => 16,
        _ => return Ok(None),
    };
    if need > sgl_len {
        return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    }
    Ok(Some(need))
}

/// Execute an admin command that sends data (see [`output_len`]) into `out`; returns completion dword 0.
pub(crate) fn execute_with_output(
    ctx: &AdminContext<'_>,
    sqe: &SubmissionQueueEntry,
    out: &mut [u8],
) -> Result<u32, Status> {
    match sqe.opcode {
        admin_op::IDENTIFY => identify(ctx, sqe, out).map(|()| 0),
        admin_op::GET_LOG_PAGE => get_log_page(ctx, sqe, out).map(|()| 0),
        admin_op::GET_FEATURES => get_host_identifier(ctx, sqe, out),
        _ => Err(Status::INVALID_OPCODE.with_dnr()),
    }
}

// -------------------------------------------------------------------------------------------------------------
// Identify
// -------------------------------------------------------------------------------------------------------------

fn identify(ctx: &AdminContext<'_>, sqe: &SubmissionQueueEntry, out: &mut [u8]) -> Result<(), Status> {
    let id = Identify::from_sqe(sqe).map_err(|_| invalid_field())?;
    let mut page = [0u8; IDENTIFY_DATA_SIZE];
    if ctx.controller.is_discovery() && id.cns != cns::CONTROLLER {
        return Err(invalid_field());
    }
    match id.cns {
        cns::CONTROLLER => {
            identify_controller(ctx).encode(&mut page).map_err(|e| {
                tracing::error!(error = %e, "Identify Controller encoding failed");
                Status::INTERNAL_ERROR.with_dnr()
            })?;
        }
        cns::NAMESPACE => {
            // NSID FFFFFFFFh asks for capabilities common to all namespaces, which only namespace management
            // defines; like Linux nvmet we answer Invalid Namespace.
            if id.nsid == 0 || id.nsid == NSID_BROADCAST || id.nsid > ctx.controller.subsystem().max_namespaces() {
                return Err(Status::INVALID_NAMESPACE.with_dnr());
            }
            // An inactive NSID in range gets a zero-filled structure (Base 2.0 §5.17.2.1).
            if let Some(ns) = ctx.table.get(id.nsid) {
                identify_namespace(ns).encode(&mut page).map_err(|_| Status::INTERNAL_ERROR.with_dnr())?;
            }
        }
        cns::ACTIVE_NAMESPACE_ID_LIST => {
            if id.nsid >= NSID_BROADCAST - 1 {
                return Err(Status::INVALID_NAMESPACE.with_dnr());
            }
            ActiveNamespaceIdList::encode(id.nsid, ctx.table.iter().map(|ns| ns.nsid()), &mut page)
                .map_err(|_| Status::INTERNAL_ERROR.with_dnr())?;
        }
        cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST => {
            let ns = ctx.table.get(id.nsid).ok_or(Status::INVALID_NAMESPACE.with_dnr())?;
            let mut descriptors = Vec::with_capacity(4);
            if ns.eui64() != [0; 8] {
                descriptors.push(NamespaceIdentificationDescriptor::Eui64(ns.eui64()));
            }
            descriptors.push(NamespaceIdentificationDescriptor::Nguid(ns.nguid()));
            descriptors.push(NamespaceIdentificationDescriptor::Uuid(ns.uuid()));
            descriptors.push(NamespaceIdentificationDescriptor::Csi(nvmf_common::nvme::identify::csi::NVM));
            NamespaceIdentificationDescriptor::encode_list(&descriptors, &mut page)
                .map_err(|_| Status::INTERNAL_ERROR.with_dnr())?;
        }
        cns::IO_COMMAND_SET_CONTROLLER => {
            // The NVM command set's limits (VSL, WZSL, WUSL, DMRL, DMRSL, DMSL) all 0: none reported beyond MDTS.
            // Linux asks for it at every connect; an error would be logged as a failed command.
            if id.csi != nvmf_common::nvme::identify::csi::NVM {
                return Err(invalid_field());
            }
        }
        _ => return Err(invalid_field()),
    }
    let n = out.len().min(IDENTIFY_DATA_SIZE);
    out[..n].copy_from_slice(&page[..n]);
    out[n..].fill(0);
    Ok(())
}

/// SGL Support for this transport: SGLs (byte aligned), in-capsule data by offset when the transport takes
/// any, keyed data blocks on RDMA, transport data blocks on TCP.
fn sgl_support(transport: &TransportInfo) -> u32 {
    let mut sgls = IdentifyController::SGLS_SUPPORTED_BYTE_ALIGNED;
    if transport.in_capsule_data_size > 0 {
        sgls |= IdentifyController::SGLS_ADDRESS_AS_OFFSET;
    }
    match transport.trtype {
        TransportType::Rdma => sgls |= IdentifyController::SGLS_KEYED_DATA_BLOCK,
        TransportType::Tcp => sgls |= IdentifyController::SGLS_TRANSPORT_DATA_BLOCK,
        TransportType::Fc | TransportType::Loop => {}
    }
    sgls
}

/// The Identify Controller data structure of `ctx.controller`.
pub(crate) fn identify_controller<'a>(ctx: &AdminContext<'a>) -> IdentifyController<'a> {
    let params = ctx.target.params();
    let controller = ctx.controller;
    let subsystem: &'a super::Subsystem = controller.subsystem();
    let maxcmd = u16::try_from(params.max_queue_entries).unwrap_or(u16::MAX);
    let common = IdentifyController {
        sn: subsystem.serial(),
        mn: subsystem.model(),
        fr: FIRMWARE_REVISION,
        mdts: params.mdts_field(),
        cntlid: controller.cntlid(),
        ver: VERSION.to_u32(),
        // Traffic Based Keep Alive: any command restarts the keep-alive timer (Queue::keep_alive_deadline).
        ctratt: IdentifyController::CTRATT_HOST_ID_128 | IdentifyController::CTRATT_TBKAS,
        aerl: AERL,
        lpa: IdentifyController::LPA_EXTENDED_DATA,
        elpe: ELPE,
        kas: controller.kas(),
        maxcmd,
        sgls: sgl_support(ctx.transport),
        subnqn: subsystem.nqn(),
        ..IdentifyController::default()
    };
    if controller.is_discovery() {
        return IdentifyController {
            cntrltype: IdentifyController::CNTRLTYPE_DISCOVERY,
            oaes: IdentifyController::OAES_DISCOVERY_LOG_PAGE_CHANGE,
            ..common
        };
    }
    let table = ctx.table;
    let vwc = if table.any_volatile_write_cache() {
        IdentifyController::VWC_PRESENT | IdentifyController::VWC_FLUSH_BROADCAST_SUPPORTED
    } else {
        0
    };
    let mut oncs = IdentifyController::ONCS_COMPARE
        | IdentifyController::ONCS_DATASET_MANAGEMENT
        | IdentifyController::ONCS_RESERVATIONS;
    if table.iter().all(|ns| ns.storage().supports_write_zeroes()) {
        oncs |= IdentifyController::ONCS_WRITE_ZEROES;
    }
    // Fused Compare and Write where a namespace does one block atomically; the others refuse it (Invalid Field).
    let atomic_block =
        |ns: &std::sync::Arc<super::Namespace>| ns.storage().compare_and_write_limit() >= Some(ns.block_size());
    let fuses = if table.iter().any(atomic_block) { IdentifyController::FUSES_COMPARE_AND_WRITE } else { 0 };
    let in_capsule = ctx.transport.in_capsule_data_size / 16 * 16;
    IdentifyController {
        rab: 6,
        // Several ports, several controllers, ANA reporting (as nvmet).
        cmic: IdentifyController::CMIC_MULTI_PORT
            | IdentifyController::CMIC_MULTI_CONTROLLER
            | IdentifyController::CMIC_ANA_REPORTING,
        oaes: IdentifyController::OAES_NAMESPACE_ATTRIBUTE_NOTICES | IdentifyController::OAES_ANA_CHANGE_NOTICES,
        anatt: ANATT_SECONDS,
        anacap: ANACAP,
        anagrpmax: ANAGRPMAX,
        nanagrpid: ANAGRPMAX,
        // As nvmet (NVMET_MAX_NAMESPACES): the Linux host sizes its ANA log buffer with MNAN.
        mnan: subsystem.max_namespaces(),
        cntrltype: IdentifyController::CNTRLTYPE_IO,
        acl: 3,
        // Firmware slot 1 is read-only; one slot.
        frmw: 0b0000_0011,
        lpa: IdentifyController::LPA_EXTENDED_DATA | IdentifyController::LPA_COMMAND_EFFECTS,
        sqes: 0x66,
        cqes: 0x44,
        nn: subsystem.max_namespaces(),
        oncs,
        fuses,
        // Compare and Write: one block (0's based) is atomic on every namespace that does it.
        acwu: 0,
        vwc,
        ioccsz: (64 + in_capsule) / 16,
        iorcsz: 1,
        icdoff: 0,
        msdbd: 1,
        ofcs: IdentifyController::OFCS_DISCONNECT,
        ..common
    }
}

/// The Identify Namespace data structure of `ns`.
pub(crate) fn identify_namespace(ns: &Namespace) -> IdentifyNamespace {
    let blocks = ns.num_blocks();
    let storage = ns.storage();
    let mut dlfeat = 0;
    if ns.deallocate_reads_zeroes() {
        dlfeat |= DLFEAT_READ_ZEROES;
    }
    if storage.supports_write_zeroes() {
        // Write Zeroes with DEAC is accepted (it zeroes; deallocation is optional).
        dlfeat |= DLFEAT_WRITE_ZEROES_DEALLOCATE;
    }
    let mut lbaf = [LbaFormat::default(); nvmf_common::nvme::identify::LBA_FORMATS];
    lbaf[0] = LbaFormat::new(ns.block_shift());
    IdentifyNamespace {
        nsze: blocks,
        ncap: blocks,
        nuse: blocks,
        nsfeat: 0,
        nlbaf: 0,
        flbas: 0,
        nmic: IdentifyNamespace::NMIC_SHARED,
        // Every type and IEKEY; PTPL only where a state directory lets the reservations persist.
        rescap: if ns.reservations().can_persist() { RESCAP_ALL } else { RESCAP_ALL & !1 },
        anagrpid: ns.ana_group(),
        dlfeat,
        nguid: ns.nguid(),
        eui64: ns.eui64(),
        lbaf,
        ..IdentifyNamespace::default()
    }
}

// -------------------------------------------------------------------------------------------------------------
// Get Log Page
// -------------------------------------------------------------------------------------------------------------

/// Copy the window `[offset, offset + out.len())` of `page` into `out`; an offset past the page is an error
/// (Base 2.0 §5.16: "Log Page Offset … greater than the size of the log page … Invalid Field").
fn copy_window(page: &[u8], offset: u64, out: &mut [u8]) -> Result<(), Status> {
    if offset > u64::try_from(page.len()).unwrap_or(u64::MAX) {
        return Err(invalid_field());
    }
    copy_log_page_range(page, offset, out);
    Ok(())
}

fn get_log_page(ctx: &AdminContext<'_>, sqe: &SubmissionQueueEntry, out: &mut [u8]) -> Result<(), Status> {
    let glp = GetLogPage::from_sqe(sqe).map_err(|_| invalid_field())?;
    let offset = glp.offset().map_err(|_| invalid_field())?;
    let controller = ctx.controller;
    match (glp.lid, controller.is_discovery()) {
        (lid::DISCOVERY, true) => {
            let page = discovery_log_page(ctx.target, controller.hostnqn(), ctx.transport).map_err(|e| {
                tracing::error!(error = %e, "discovery log encoding failed");
                Status::INTERNAL_ERROR.with_dnr()
            })?;
            copy_window(&page, offset, out)?;
            if !glp.rae {
                Controller::unmask_locked(&mut controller.lock(), EventKind::DiscoveryLog);
            }
            Ok(())
        }
        (lid::ERROR_INFORMATION, _) => {
            let mut page = [0u8; (ELPE as usize + 1) * ERROR_INFORMATION_ENTRY_SIZE];
            {
                let state = controller.lock();
                let entries: Vec<ErrorInformationEntry> = state.errors.iter().copied().collect();
                ErrorInformationEntry::encode_log(&entries, &mut page)
                    .map_err(|_| Status::INTERNAL_ERROR.with_dnr())?;
            }
            copy_window(&page, offset, out)
        }
        (lid::SMART_HEALTH_INFORMATION, false) => {
            // SMART is controller-wide (LPA bit 0 clear): only NSID 0 or FFFFFFFFh.
            if glp.nsid != 0 && glp.nsid != NSID_BROADCAST {
                return Err(invalid_field());
            }
            copy_window(&smart_log(controller).to_bytes(), offset, out)
        }
        (lid::FIRMWARE_SLOT_INFORMATION, false) => {
            let mut page = [0u8; FIRMWARE_SLOT_LOG_SIZE];
            // AFI: slot 1 active (bits 2:0); FRS1 at bytes 15:8.
            page[0] = 1;
            let fr = FIRMWARE_REVISION.as_bytes();
            page[8..16].fill(b' ');
            page[8..8 + fr.len()].copy_from_slice(fr);
            copy_window(&page, offset, out)
        }
        (lid::CHANGED_NAMESPACE_LIST, false) => {
            let mut page = [0u8; CHANGED_NAMESPACE_LIST_SIZE];
            let mut state = controller.lock();
            let changed = &state.changed;
            if changed.overflow {
                page[..4].copy_from_slice(&NSID_BROADCAST.to_le_bytes());
            } else {
                ChangedNamespaceList::encode(changed.nsids.iter().copied(), &mut page)
                    .map_err(|_| Status::INTERNAL_ERROR.with_dnr())?;
            }
            copy_window(&page, offset, out)?;
            if !glp.rae {
                state.changed.nsids.clear();
                state.changed.overflow = false;
                Controller::unmask_locked(&mut state, EventKind::NamespaceAttribute);
            }
            Ok(())
        }
        (lid::ASYMMETRIC_NAMESPACE_ACCESS, false) => {
            let page = ana_log(ctx).to_bytes(glp.lsp & ANA_RGO != 0);
            copy_window(&page, offset, out)?;
            if !glp.rae {
                Controller::unmask_locked(&mut controller.lock(), EventKind::AnaChange);
            }
            Ok(())
        }
        (lid::COMMANDS_SUPPORTED_AND_EFFECTS, false) => copy_window(&commands_effects().to_bytes(), offset, out),
        (lid::RESERVATION_NOTIFICATION, false) => {
            // Reading a page removes it (Base 2.0 §5.16.1.23); the event stays masked until the host reads the log
            // without RAE.
            let mut state = controller.lock();
            let page = state.reservation_log.take();
            copy_window(&page.to_bytes(), offset, out)?;
            if !glp.rae {
                Controller::unmask_locked(&mut state, EventKind::ReservationLog);
            }
            Ok(())
        }
        _ => Err(Status::INVALID_LOG_PAGE.with_dnr()),
    }
}

/// The ANA log as the controller's listener sees it: the default group and every group of the subsystem's
/// namespaces, each with its change count, its state on this listener and its NSIDs.
fn ana_log(ctx: &AdminContext<'_>) -> AnaLog {
    let table = ctx.target.ana();
    let states = table.port(ctx.transport.port_id);
    let mut groups = ctx.table.ana_groups();
    if groups.first() != Some(&DEFAULT_ANA_GROUP) {
        groups.insert(0, DEFAULT_ANA_GROUP);
    }
    AnaLog {
        chgcnt: table.chgcnt(),
        groups: groups
            .into_iter()
            .map(|grpid| AnaGroupDescriptor {
                grpid,
                chgcnt: table.group_chgcnt(grpid),
                state: states.get(grpid),
                nsids: ctx.table.iter().filter(|ns| ns.ana_group() == grpid).map(|ns| ns.nsid()).collect(),
            })
            .collect(),
    }
}

/// Data units for the SMART log: thousands of 512-byte units, rounded up.
pub(crate) fn data_units(bytes: u64) -> u128 {
    u128::from(bytes).div_ceil(512_000)
}

/// The subsystem's I/O totals (see [`Subsystem::counters`](super::Subsystem::counters)); the error log entry
/// count is this controller's.
fn smart_log(controller: &Controller) -> SmartLog {
    let counters = controller.subsystem().counters();
    let error_entries = controller.lock().error_count;
    SmartLog {
        available_spare: 100,
        available_spare_threshold: 10,
        data_units_read: data_units(counters.bytes_read),
        data_units_written: data_units(counters.bytes_written),
        host_read_commands: u128::from(counters.read_commands),
        host_write_commands: u128::from(counters.write_commands),
        media_errors: u128::from(counters.media_errors),
        number_of_error_log_entries: u128::from(error_entries),
        ..SmartLog::default()
    }
}

fn commands_effects() -> CommandsSupportedAndEffects {
    let mut log = CommandsSupportedAndEffects::default();
    let supported = CommandsSupportedAndEffects::CSUPP;
    for op in [
        admin_op::GET_LOG_PAGE,
        admin_op::IDENTIFY,
        admin_op::ABORT,
        admin_op::SET_FEATURES,
        admin_op::GET_FEATURES,
        admin_op::ASYNC_EVENT_REQUEST,
        admin_op::KEEP_ALIVE,
    ] {
        log.set_admin(op, supported);
    }
    let changes = supported | CommandsSupportedAndEffects::LBCC;
    for (op, effects) in [
        (io_op::FLUSH, supported),
        (io_op::WRITE, changes),
        (io_op::READ, supported),
        (io_op::COMPARE, supported),
        (io_op::WRITE_ZEROES, changes),
        (io_op::DATASET_MANAGEMENT, changes),
        (io_op::RESERVATION_REGISTER, supported),
        (io_op::RESERVATION_REPORT, supported),
        (io_op::RESERVATION_ACQUIRE, supported),
        (io_op::RESERVATION_RELEASE, supported),
    ] {
        log.set_io(op, effects);
    }
    log
}

// -------------------------------------------------------------------------------------------------------------
// Get / Set Features
// -------------------------------------------------------------------------------------------------------------

/// Features this controller knows, and whether the host may change them.
fn feature_changeable(ctx: &AdminContext<'_>, feature: u8) -> Option<bool> {
    let discovery = ctx.controller.is_discovery();
    match feature {
        fid::KEEP_ALIVE_TIMER | fid::ASYNCHRONOUS_EVENT_CONFIGURATION => Some(true),
        fid::VOLATILE_WRITE_CACHE if !discovery => Some(ctx.table.any_volatile_write_cache()),
        fid::NUMBER_OF_QUEUES if !discovery => Some(true),
        fid::HOST_IDENTIFIER if !discovery => Some(false),
        fid::RESERVATION_NOTIFICATION_MASK | fid::RESERVATION_PERSISTENCE if !discovery => Some(true),
        _ => None,
    }
}

/// Asynchronous Event Configuration bits this controller can report.
fn aec_supported(controller: &Controller) -> u32 {
    if controller.is_discovery() {
        1 << 31
    } else {
        // SMART critical warnings (never raised, but the host may enable them), namespace attribute and ANA change
        // notices.
        0xff | 1 << 8 | 1 << 11
    }
}

/// Get Features without data; completion dword 0.
pub(crate) fn get_features(ctx: &AdminContext<'_>, sqe: &SubmissionQueueEntry) -> Result<u32, Status> {
    let get = GetFeatures::from_sqe(sqe).map_err(|_| invalid_field())?;
    let changeable = feature_changeable(ctx, get.fid).ok_or_else(invalid_field)?;
    let namespace_specific = matches!(get.fid, fid::RESERVATION_NOTIFICATION_MASK | fid::RESERVATION_PERSISTENCE);
    if get.sel == Select::SupportedCapabilities {
        return Ok(SupportedCapabilities { saveable: false, namespace_specific, changeable }.to_dw0());
    }
    let controller = ctx.controller;
    // Nothing is saveable, so the saved and default values are the defaults; we report the current value for
    // every SEL other than capabilities, as Linux nvmet does.
    Ok(match get.fid {
        fid::VOLATILE_WRITE_CACHE => {
            VolatileWriteCache { wce: ctx.table.any_volatile_write_cache() && controller.write_cache_enabled() }
                .to_dword()
        }
        fid::NUMBER_OF_QUEUES => {
            let granted = controller.lock().granted_io_queues.saturating_sub(1);
            NumberOfQueues { nsqr: granted, ncqr: granted }.to_dw0()
        }
        fid::ASYNCHRONOUS_EVENT_CONFIGURATION => controller.lock().aec,
        fid::KEEP_ALIVE_TIMER => controller.kato_ms(),
        fid::RESERVATION_NOTIFICATION_MASK => controller.reservation_mask(namespace(ctx, get.nsid)?.nsid()),
        fid::RESERVATION_PERSISTENCE => u32::from(namespace(ctx, get.nsid)?.reservations().ptpl()),
        _ => return Err(invalid_field()),
    })
}

/// The active namespace a namespace-specific feature names.
fn namespace<'a>(ctx: &AdminContext<'a>, nsid: u32) -> Result<&'a Namespace, Status> {
    ctx.table.get(nsid).map(|ns| &**ns).ok_or(Status::INVALID_NAMESPACE.with_dnr())
}

/// Get Features Host Identifier: the 128-bit host ID from Connect as data.
fn get_host_identifier(ctx: &AdminContext<'_>, sqe: &SubmissionQueueEntry, out: &mut [u8]) -> Result<u32, Status> {
    let get = GetFeatures::from_sqe(sqe).map_err(|_| invalid_field())?;
    if get.fid != fid::HOST_IDENTIFIER || ctx.controller.is_discovery() {
        return Err(invalid_field());
    }
    if get.sel == Select::SupportedCapabilities {
        return Ok(SupportedCapabilities::default().to_dw0());
    }
    // Fabrics use the extended (128-bit) identifier only.
    if get.cdw11 & nvmf_common::nvme::features::HostIdentifier::EXHID == 0 {
        return Err(Status::HOST_IDENTIFIER_INCONSISTENT_FORMAT.with_dnr());
    }
    out.fill(0);
    let n = out.len().min(16);
    out[..n].copy_from_slice(&ctx.controller.hostid()[..n]);
    Ok(nvmf_common::nvme::features::HostIdentifier::EXHID)
}

/// Set Features; completion dword 0.
pub(crate) fn set_features(ctx: &AdminContext<'_>, sqe: &SubmissionQueueEntry) -> Result<u32, Status> {
    let set = SetFeatures::from_sqe(sqe).map_err(|_| invalid_field())?;
    feature_changeable(ctx, set.fid).ok_or_else(invalid_field)?;
    if set.sv {
        return Err(Status::FEATURE_NOT_SAVEABLE.with_dnr());
    }
    let controller = ctx.controller;
    match set.fid {
        fid::VOLATILE_WRITE_CACHE => {
            if !ctx.table.any_volatile_write_cache() {
                return Err(invalid_field());
            }
            let value: VolatileWriteCache = set.value().map_err(|_| invalid_field())?;
            controller.set_write_cache(value.wce);
            Ok(0)
        }
        fid::NUMBER_OF_QUEUES => {
            let asked: NumberOfQueues = set.value().map_err(|_| invalid_field())?;
            let max = controller.max_io_queues();
            let mut state = controller.lock();
            // Queues are allocated in pairs: grant the smaller request, up to the target's maximum. Once I/O
            // queues exist the grant stays (Linux nvmet ignores the request altogether).
            if state.io_queue_count() == 0 {
                state.granted_io_queues = asked.nsqr.min(asked.ncqr).saturating_add(1).min(max);
            }
            let granted = state.granted_io_queues.saturating_sub(1);
            Ok(NumberOfQueues { nsqr: granted, ncqr: granted }.to_dw0())
        }
        fid::ASYNCHRONOUS_EVENT_CONFIGURATION => {
            controller.lock().aec = set.cdw11 & aec_supported(controller);
            Ok(0)
        }
        fid::KEEP_ALIVE_TIMER => {
            if set.cdw11 > ctx.target.params().kato_max_ms {
                return Err(Status::KEEP_ALIVE_TIMEOUT_INVALID.with_dnr());
            }
            let kato = ctx.target.kato_with_minimum(set.cdw11).ok_or(Status::KEEP_ALIVE_TIMEOUT_INVALID.with_dnr())?;
            controller.set_kato(kato);
            Ok(0)
        }
        // Over fabrics the host identifier comes with Connect and cannot change (Linux nvmet answers the same).
        fid::HOST_IDENTIFIER => Err(Status::COMMAND_SEQUENCE_ERROR.with_dnr()),
        fid::RESERVATION_NOTIFICATION_MASK => {
            let mask = set.cdw11;
            if mask & !NOTIFICATION_MASK_ALL != 0 {
                return Err(invalid_field());
            }
            // This controller's, of one namespace or, NSID FFFFFFFFh, of every namespace (as nvmet).
            if set.nsid == NSID_BROADCAST {
                ctx.table.iter().for_each(|ns| controller.set_reservation_mask(ns.nsid(), mask));
            } else {
                controller.set_reservation_mask(namespace(ctx, set.nsid)?.nsid(), mask);
            }
            Ok(mask)
        }
        fid::RESERVATION_PERSISTENCE => {
            let ptpl = set.cdw11 & 1 != 0;
            let reservations = namespace(ctx, set.nsid)?.reservations();
            if ptpl && !reservations.can_persist() {
                return Err(invalid_field());
            }
            // Only a registrant changes whether the namespace's reservations persist: otherwise any host the
            // subsystem allows could turn PTPL off (its state file removed) under the hosts that rely on it. nvmet
            // and SPDK let any host; the Linux host sets PTPL through Register's CPTPL, which is a registrant's.
            if !reservations.read().registrants.contains(controller.hostid_ref()) {
                ctx.target.count_reservation_conflict();
                return Err(Status::RESERVATION_CONFLICT.with_dnr());
            }
            reservations.set_ptpl(ptpl)?;
            Ok(u32::from(ptpl))
        }
        _ => Err(invalid_field()),
    }
}
