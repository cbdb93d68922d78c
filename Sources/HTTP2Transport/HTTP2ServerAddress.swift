import NIOCore

/// Where a client's connections go: a host name or IP literal (IPv6 without brackets) and a port.
package struct HTTP2ServerAddress: Sendable, Hashable, CustomStringConvertible {
    package var host: String
    package var port: Int

    package init(host: String, port: Int = 443) {
        self.host = host
        self.port = port
    }

    /// True when `host` is an IPv4 or IPv6 literal (no SNI is sent then; the certificate must
    /// name the address).
    package var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }

    /// The `:authority` value: the host, bracketed when IPv6, plus the port when not 443.
    package var authority: String {
        let hostPart = host.contains(":") ? "[\(host)]" : host
        return port == 443 ? hostPart : "\(hostPart):\(port)"
    }

    package var description: String { "https://\(authority)" }
}
