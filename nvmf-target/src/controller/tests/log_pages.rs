//! Get Log Page: SMART / Health counters, offset and length, and the Error Information log.

use super::*;

#[test]
fn smart_log_counts_io() {
    let mut a = associate(target());
    let data = pattern(8192, 1);
    a.io.write(&mut a.engine, 1, 0, &data).ok();
    a.io.write(&mut a.engine, 1, 16, &data).ok();
    a.io.read(&mut a.engine, 1, 0, 16).ok();
    let smart = SmartLog::parse(
        &a.admin
            .log_page(&mut a.engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0xFFFF_FFFF, 512).unwrap())
            .ok()
            .data,
    )
    .unwrap();
    assert_eq!(smart.host_write_commands, 2);
    assert_eq!(smart.host_read_commands, 1);
    // 16 KiB written = 32 units of 512 bytes: reported as 1 thousand, rounded up.
    assert_eq!(smart.data_units_written, 1);
    assert_eq!(smart.data_units_read, 1);
    assert_eq!(admin::data_units(512_000), 1);
    assert_eq!(admin::data_units(512_001), 2);
    assert_eq!(admin::data_units(0), 0);
    // SMART per namespace is not supported.
    let done = a.admin.log_page(&mut a.engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 1, 512).unwrap());
    assert_eq!(done.status(), Status::INVALID_FIELD.with_dnr());
    // The counts are the subsystem's, as nvmet reports its devices' totals: another association sees them, and
    // they stay when the association that did the I/O ends.
    let smart_of = |host: &mut Host, engine: &mut IoEngine| {
        let glp = GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0xFFFF_FFFF, 512).unwrap();
        SmartLog::parse(&host.log_page(engine, glp).ok().data).unwrap()
    };
    let mut other = Host::new(&a.target);
    other.connect(&mut a.engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    other.enable(&mut a.engine);
    assert_eq!(smart_of(&mut other, &mut a.engine).host_write_commands, 2);
    a.io.queue.disconnect(&mut a.engine);
    a.admin.queue.disconnect(&mut a.engine);
    let after = smart_of(&mut other, &mut a.engine);
    assert_eq!((after.host_write_commands, after.host_read_commands), (2, 1));
}

#[test]
fn log_pages_honour_offset_and_length() {
    let mut a = associate(target());
    let full = a
        .admin
        .log_page(&mut a.engine, GetLogPage::new(lid::COMMANDS_SUPPORTED_AND_EFFECTS, 0, 4096).unwrap())
        .ok()
        .data;
    let effects = CommandsSupportedAndEffects::parse(&full).unwrap();
    assert_ne!(effects.admin(0x06) & CommandsSupportedAndEffects::CSUPP, 0);
    assert_ne!(effects.io(0x01) & CommandsSupportedAndEffects::LBCC, 0);
    assert_eq!(effects.io(0x7E), 0);
    // The window [1024, 1024 + 64).
    let mut glp = GetLogPage::new(lid::COMMANDS_SUPPORTED_AND_EFFECTS, 0, 64).unwrap();
    glp.lpo = 1024;
    assert_eq!(a.admin.log_page(&mut a.engine, glp).ok().data, full[1024..1088]);
    // Past the end of the page: zeros beyond, an error when the offset itself is beyond.
    glp.lpo = 4096 - 32;
    let tail = a.admin.log_page(&mut a.engine, glp).ok().data;
    assert_eq!(tail[..32], full[4064..]);
    assert!(tail[32..].iter().all(|&b| b == 0));
    glp.lpo = 8192;
    assert_eq!(a.admin.log_page(&mut a.engine, glp).status(), Status::INVALID_FIELD.with_dnr());
    glp.lpo = 2;
    assert_eq!(a.admin.log_page(&mut a.engine, glp).status(), Status::INVALID_FIELD.with_dnr());
    // Unknown log, discovery log on an I/O controller.
    for id in [0x42, lid::DISCOVERY] {
        let done = a.admin.log_page(&mut a.engine, GetLogPage::new(id, 0, 512).unwrap());
        assert_eq!(done.status(), Status::INVALID_LOG_PAGE.with_dnr());
    }
    // NUMD asking for more than the SGL holds; more than MDTS.
    let sqe = with_sgl(GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0, 512).unwrap().to_sqe(), transport_data(256));
    assert_eq!(a.admin.run(&mut a.engine, sqe).status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    let sqe = with_sgl(GetLogPage::new(lid::ERROR_INFORMATION, 0, 1 << 20).unwrap().to_sqe(), transport_data(1 << 20));
    assert_eq!(a.admin.run(&mut a.engine, sqe).status(), Status::INVALID_FIELD.with_dnr());
    // Firmware slot: slot 1 active.
    let fw =
        a.admin.log_page(&mut a.engine, GetLogPage::new(lid::FIRMWARE_SLOT_INFORMATION, 0, 512).unwrap()).ok().data;
    assert_eq!(fw[0], 1);
    assert_ne!(fw[8], 0);
}

#[test]
fn error_log_records_failed_commands() {
    let mut a = associate(target());
    assert_eq!(a.io.read(&mut a.engine, 9, 0, 1).status(), Status::INVALID_NAMESPACE.with_dnr());
    assert_eq!(a.io.read(&mut a.engine, 1, 1 << 40, 1).status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    let page = a.admin.log_page(&mut a.engine, GetLogPage::new(lid::ERROR_INFORMATION, 0, 1024).unwrap()).ok().data;
    let entries: Vec<_> = ErrorInformationEntry::parse_log(&page).filter(|e| e.error_count != 0).collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].error_count, 2, "newest first");
    assert_eq!(entries[0].status, Status::LBA_OUT_OF_RANGE.with_dnr());
    assert_eq!(entries[0].sqid, 1);
    assert_eq!(entries[1].nsid, 9);
    let smart = SmartLog::parse(
        &a.admin.log_page(&mut a.engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0, 512).unwrap()).ok().data,
    )
    .unwrap();
    assert_eq!(smart.number_of_error_log_entries, 2);
}
