// WebPushConnection.swift: one HTTP/2 connection to one push service's origin, the origin as
// the pool keys it, and a subscription's endpoint split into that origin and its `:path`.

import Logging
import HTTP2TLS
import HTTP2Transport

/// A push service's origin as Herald connects to it: the endpoint's host (lower-cased, an IPv6
/// literal without brackets) and port. The connection pool's endpoint: each origin has
/// connections of its own.
struct WebPushOrigin: Hashable, Sendable {
    var host: String
    var port: Int

    /// Where the origin's connections go.
    var address: HTTP2ServerAddress { HTTP2ServerAddress(host: host, port: port) }
}

/// Where a subscription's messages go: the origin the client connects to and the `:path`.
struct WebPushTarget {
    var origin: WebPushOrigin
    /// The endpoint's path and query, `/` when it has none.
    var path: String

    /// Splits `endpoint`, an `https` URL, by hand: the host checked against the allow-list is
    /// exactly the one connected to. Nil when the authority is not `host[:port]` of host-name
    /// or IP-literal characters.
    init?(endpoint: String) {
        guard endpoint.prefix(8).lowercased() == "https://" else { return nil }
        let rest = endpoint.dropFirst(8)
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        var tail = rest[authorityEnd...]
        if let fragment = tail.firstIndex(of: "#") { tail = tail[..<fragment] }
        let host: Substring
        let port: Substring
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else { return nil }
            port = after.dropFirst()
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            port = authority[authority.index(after: colon)...]
        } else {
            host = authority
            port = ""
        }
        guard !host.isEmpty, host.utf8.allSatisfy(Self.isHostByte) else { return nil }
        let portNumber = port.isEmpty ? 443 : Int(port) ?? 0
        guard (1...65_535).contains(portNumber) else { return nil }
        origin = WebPushOrigin(host: host.lowercased(), port: portNumber)
        if tail.hasPrefix("/") {
            path = String(tail)
        } else {
            path = "/" + String(tail)
        }
    }

    /// Letters, digits, `-` and `.` of a host name, `:` of an IPv6 literal.
    private static func isHostByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: ":"):
            true
        default:
            false
        }
    }
}
