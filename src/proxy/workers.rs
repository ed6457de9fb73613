//! The proxy's relay threads beyond the first (`plbbench proxy --threads
//! N`, [proxy](docs/proxy.md)). The proxy relays on one thread by default,
//! as PgBouncer does: a single event loop wakes no other thread per
//! message. For more clients than one core can relay, each extra thread
//! runs an event loop of its own (a current-thread runtime, so a session's
//! reads and writes never leave its thread either); the accept loop hands
//! every new connection to the next thread in turn, its own included, and
//! the only cross-thread wake-up is that hand-off, once per connection.

use super::Shared;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// A connection on its way to a relay thread: its id and its socket,
/// detached from the accepting thread's event loop.
type Handed = (u32, std::net::TcpStream);

/// The extra relay threads and the turn of the next connection.
pub(super) struct Workers {
    /// One queue per extra thread.
    queues: Vec<mpsc::UnboundedSender<Handed>>,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
    /// Connections handed out so far (the accepting thread's included).
    turn: usize,
}

impl Workers {
    /// Starts `threads - 1` relay threads beside the accepting one (none
    /// for 1); fails with the cause when a thread or its runtime cannot
    /// start.
    pub fn start(threads: usize, shared: &Arc<Shared>, login_timeout: Duration) -> std::io::Result<Workers> {
        let mut w = Workers { queues: Vec::new(), threads: Vec::new(), shared: shared.clone(), turn: 0 };
        for i in 1..threads {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (tx, rx) = mpsc::unbounded_channel();
            let shared = shared.clone();
            let t = std::thread::Builder::new()
                .name(format!("plbbench-relay-{i}"))
                .spawn(move || runtime.block_on(serve(rx, shared, login_timeout)))?;
            w.queues.push(tx);
            w.threads.push(t);
        }
        Ok(w)
    }

    /// Passes connection `id` (counted open) to the next thread in turn;
    /// gives it back when that thread is the caller's, or when the thread
    /// is gone (the caller serves it then). A socket that cannot be
    /// detached from the caller's event loop is closed.
    pub fn hand(&mut self, id: u32, sock: TcpStream) -> Option<TcpStream> {
        let slot = self.turn % (self.queues.len() + 1);
        self.turn = self.turn.wrapping_add(1);
        let Some(queue) = slot.checked_sub(1).and_then(|q| self.queues.get(q)) else { return Some(sock) };
        let Ok(std) = sock.into_std() else {
            self.shared.open.fetch_sub(1, Ordering::SeqCst);
            return None;
        };
        match queue.send((id, std)) {
            Ok(()) => None,
            Err(mpsc::error::SendError((_, std))) => TcpStream::from_std(std).ok(),
        }
    }

    /// Closes the queues and waits for the threads: each ends once its
    /// queue is closed, dropping the sessions it still holds (the caller
    /// has drained them by then).
    pub fn stop(self) {
        drop(self.queues);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A relay thread's loop: serves each connection handed to it until its
/// queue closes.
async fn serve(mut rx: mpsc::UnboundedReceiver<Handed>, shared: Arc<Shared>, login_timeout: Duration) {
    while let Some((id, std)) = rx.recv().await {
        match TcpStream::from_std(std) {
            Ok(sock) => {
                tokio::spawn(super::connection(shared.clone(), id, sock, login_timeout));
            }
            Err(_) => {
                shared.open.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}
