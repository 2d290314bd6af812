#![doc = include_str!("../README.md")]

// The entry points Redis calls (redis-module's `redis_module!` and the commands): not in
// unit-test builds, whose allocator is the system's, not Redis's.
#[cfg(not(test))]
mod commands;
pub mod decide;
pub mod fg;
#[cfg(not(test))]
mod keys;
pub mod leases;
pub mod limits;
pub mod log;
pub mod script_values;
pub mod settle;
pub mod throttle;
pub mod value;
#[cfg(not(test))]
mod zset;
