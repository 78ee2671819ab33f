//! Loopback ports for throwaway servers: the OS picks a free one, never 6379.

use std::net::TcpListener;

/// A loopback port nobody listens on now (the OS picks it; never 6379).
pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        if port != 6379 {
            return port;
        }
    }
}
