//! The one place the crate waits for the GPU. Results come back through
//! futures completed by wgpu's callbacks (`map_async`,
//! `on_submitted_work_done`): in a browser the page's event loop runs those
//! callbacks while the future is awaited; on native, `Device::settle`
//! first polls the device until the callbacks have run, and the blocking API
//! is [`block_on`] over the same async code.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

#[cfg(target_arch = "wasm32")]
use crate::error::Error;
use crate::error::Result;

#[derive(Default)]
struct State {
    pending: usize,
    failed: bool,
    waker: Option<Waker>,
}

/// Completion of a batch of wgpu callbacks: each [`Signal::map_callback`] or
/// [`Signal::done_callback`] adds
/// one to wait for; [`Signal::done`] resolves when all have run, to whether
/// any reported a failure.
#[derive(Clone, Default)]
pub(crate) struct Signal(Arc<Mutex<State>>);

impl Signal {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn arrive(&self, ok: bool) {
        let mut s = self.state();
        s.pending = s.pending.saturating_sub(1);
        s.failed |= !ok;
        if s.pending == 0
            && let Some(w) = s.waker.take()
        {
            w.wake();
        }
    }

    /// A `map_async` callback that counts toward this signal.
    pub(crate) fn map_callback(
        &self,
    ) -> impl FnOnce(std::result::Result<(), wgpu::BufferAsyncError>) + Send + 'static {
        self.state().pending += 1;
        let me = self.clone();
        move |r| me.arrive(r.is_ok())
    }

    /// An `on_submitted_work_done` callback that counts toward this signal.
    pub(crate) fn done_callback(&self) -> impl FnOnce() + Send + 'static {
        self.state().pending += 1;
        let me = self.clone();
        move || me.arrive(true)
    }

    /// Resolves once every callback has run: `true` if one failed.
    pub(crate) fn done(&self) -> impl Future<Output = bool> + use<> {
        Done(self.clone())
    }
}

struct Done(Signal);

impl Future for Done {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let mut s = self.0.state();
        if s.pending == 0 {
            Poll::Ready(s.failed)
        } else {
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

/// Run an async operation of the crate to its end, blocking this thread:
/// the native blocking API is this over the async one. In a browser nothing
/// may block, so there it is [`Error::WouldBlock`](crate::Error::WouldBlock) unless the result is
/// already there.
pub(crate) fn block_on<T>(op: &'static str, f: impl Future<Output = Result<T>>) -> Result<T> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = op;
        pollster::block_on(f)
    }
    #[cfg(target_arch = "wasm32")]
    {
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(Error::WouldBlock { op }),
        }
    }
}
