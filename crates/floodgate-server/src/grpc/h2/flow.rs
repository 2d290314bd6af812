//! The connection's control frames and flow control: the client's SETTINGS and
//! WINDOW_UPDATEs, the windows given back to it, and the replies sent as far as the
//! windows allow.

use super::conn::{Conn, Recv, WINDOW};
use super::frame::{self, Head, Reason, flag, kind, setting};

impl Conn {
    pub(super) fn settings(&mut self, h: Head, payload: &[u8]) {
        if h.stream != 0 {
            return self.fail(Reason::ProtocolError);
        }
        if h.flags & flag::ACK != 0 {
            if h.len != 0 {
                self.fail(Reason::FrameSizeError);
            }
            return;
        }
        if !h.len.is_multiple_of(6) {
            return self.fail(Reason::FrameSizeError);
        }
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => return self.fail(Reason::ProtocolError),
                setting::INITIAL_WINDOW_SIZE => {
                    let value = i64::from(value);
                    if value > frame::MAX_WINDOW {
                        return self.fail(Reason::FlowControlError);
                    }
                    let delta = value - self.peer_window;
                    self.peer_window = value;
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > frame::MAX_WINDOW {
                            return self.fail(Reason::FlowControlError);
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::MIN_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&value) {
                        return self.fail(Reason::ProtocolError);
                    }
                    self.peer_max_frame = value as usize;
                }
                // the server's encoder keeps no table; the rest concern pushes or are
                // advisory
                setting::HEADER_TABLE_SIZE
                | setting::ENABLE_PUSH
                | setting::MAX_CONCURRENT_STREAMS
                | setting::MAX_HEADER_LIST_SIZE => {}
                _ => {}
            }
        }
        frame::put_frame(&mut self.out, kind::SETTINGS, flag::ACK, 0, &[]);
        self.flush_all();
    }

    pub(super) fn window_update(&mut self, h: Head, payload: &[u8]) {
        if h.len != 4 {
            return self.fail(Reason::FrameSizeError);
        }
        let inc = i64::from(
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff,
        );
        if h.stream == 0 {
            if inc == 0 {
                return self.fail(Reason::ProtocolError);
            }
            self.send_window += inc;
            if self.send_window > frame::MAX_WINDOW {
                return self.fail(Reason::FlowControlError);
            }
            return self.flush_all();
        }
        if h.stream > self.last_stream {
            return self.fail(Reason::ProtocolError);
        }
        let Some(s) = self.streams.get_mut(&h.stream) else {
            return;
        };
        if inc == 0 {
            return self.reset(h.stream, Reason::ProtocolError);
        }
        s.send_window += inc;
        if s.send_window > frame::MAX_WINDOW {
            return self.reset(h.stream, Reason::FlowControlError);
        }
        self.flush(h.stream);
    }

    /// Give `n` octets of the connection's window back, in updates of at least half of it.
    pub(super) fn credit(&mut self, n: usize) {
        self.recv_credit += n as u32;
        if i64::from(self.recv_credit) >= WINDOW / 2 {
            frame::put_window_update(&mut self.out, 0, self.recv_credit);
            self.recv_window += i64::from(self.recv_credit);
            self.recv_credit = 0;
        }
    }

    /// Send what the windows allow of stream `id`'s reply; its trailers (or the end)
    /// once all data is sent.
    pub(super) fn flush(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        while let Some(front) = s.queued.front_mut() {
            if front.is_empty() {
                s.queued.pop_front();
                continue;
            }
            let n = (front.len() as i64)
                .min(self.peer_max_frame as i64)
                .min(self.send_window)
                .min(s.send_window);
            if n <= 0 {
                return;
            }
            let chunk = front.split_to(n as usize);
            if front.is_empty() {
                s.queued.pop_front();
            }
            s.queued_len -= chunk.len();
            let last = s.queued.is_empty() && s.trailers.is_none() && s.end_after_data;
            frame::put_frame(
                &mut self.out,
                kind::DATA,
                if last { flag::END_STREAM } else { 0 },
                id,
                &chunk,
            );
            self.send_window -= n;
            s.send_window -= n;
            if last {
                return self.close_local(id);
            }
        }
        if let Some(block) = s.trailers.take() {
            frame::put_headers(&mut self.out, id, &block, true, self.peer_max_frame);
            self.close_local(id);
        } else if s.end_after_data {
            frame::put_frame(&mut self.out, kind::DATA, flag::END_STREAM, id, &[]);
            self.close_local(id);
        }
    }

    pub(super) fn flush_all(&mut self) {
        let waiting: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| !s.queued.is_empty())
            .map(|(&id, _)| id)
            .collect();
        for id in waiting {
            self.flush(id);
        }
    }

    /// The server sent the end of stream `id`'s reply.
    pub(super) fn close_local(&mut self, id: u32) {
        if let Some(s) = self.streams.remove(&id)
            && !matches!(s.recv, Recv::Closed)
        {
            // the client is still sending: tell it to stop (RFC 9113 8.1)
            frame::put_reset(&mut self.out, id, Reason::NoError);
        }
    }

    /// A stream error: RST_STREAM and forget the stream.
    pub(super) fn reset(&mut self, id: u32, reason: Reason) {
        frame::put_reset(&mut self.out, id, reason);
        self.streams.remove(&id);
    }
}
