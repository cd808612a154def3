//! The admin commands a caller reads a controller's state with: Identify and Get Log Page, returning the raw data
//! structures (`nvmf_common::nvme::identify` and `log_page` parse them). Held across a reconnect like every
//! [`Controller::admin_command`].

use nvmf_common::nvme::identify::{Identify, IDENTIFY_DATA_SIZE};
use nvmf_common::nvme::log_page::GetLogPage;

use super::Controller;
use crate::error::HostError;
use crate::queue::DataDirection;

impl Controller {
    /// Identify structure `cns` for `nsid` (see `nvmf_common::nvme::identify::cns`): its 4096 bytes.
    pub fn identify(&self, cns: u8, nsid: u32) -> Result<Vec<u8>, HostError> {
        let sqe = Identify::new(cns, nsid).to_sqe();
        let reply =
            self.admin_command("Identify", sqe, DataDirection::ControllerToHost, vec![0; IDENTIFY_DATA_SIZE])?;
        Ok(reply.data)
    }

    /// The first `len` bytes of log page `lid` for `nsid` (`u32::MAX`: the controller's), `len` a non-zero
    /// multiple of 4. A log longer than MDTS is read in MDTS-sized pieces at increasing Log Page Offsets, as
    /// nvme-cli does.
    pub fn get_log_page(&self, lid: u8, nsid: u32, len: usize) -> Result<Vec<u8>, HostError> {
        let piece = self.info().max_transfer.map_or(len, |m| usize::try_from(m).unwrap_or(len).max(4));
        let mut log = Vec::with_capacity(len);
        while log.len() < len {
            let n = piece.min(len - log.len());
            let mut glp = GetLogPage::new(lid, nsid, n as u64)
                .map_err(|e| HostError::InvalidRequest(format!("log page length {len}: {e}")))?;
            glp.lpo = log.len() as u64;
            let reply =
                self.admin_command("Get Log Page", glp.to_sqe(), DataDirection::ControllerToHost, vec![0; n])?;
            log.extend_from_slice(&reply.data);
        }
        Ok(log)
    }
}
