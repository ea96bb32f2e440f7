//! [`AsAny`]: a family's block or config reached as its own type through
//! the skeleton's trait objects, implemented once for every type.

use std::any::Any;

/// A value as [`Any`], to downcast a trait object to its family's type.
pub trait AsAny: Any {
    /// As [`Any`].
    fn as_any(&self) -> &dyn Any;
    /// As mutable [`Any`].
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
