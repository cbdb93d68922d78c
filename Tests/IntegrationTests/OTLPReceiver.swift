import Foundation
import Synchronization

/// A real OTLP/HTTP endpoint for tests: accepts `POST /v1/traces` with a JSON body (the
/// exporter's `http/json` protocol), answers 200 and keeps every span it received. One thread
/// serves one connection at a time (HTTP/1.1 keep-alive honoured), enough for one exporter.
final class OTLPReceiver: Sendable {
    /// One received span: hex IDs (empty parent for a root) and string-valued attributes.
    struct ReceivedSpan: Sendable, Hashable {
        var name: String
        var traceID: String
        var spanID: String
        var parentSpanID: String
        var attributes: [String: String]
    }

    let port: Int
    private let listener: Int32
    private let received = Mutex<[ReceivedSpan]>([])

    /// Listens on a free loopback port and serves on a thread of its own.
    static func start() throws -> OTLPReceiver {
        let receiver = try OTLPReceiver()
        Thread { receiver.serve() }.start()
        return receiver
    }

    private init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 8) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard listening else {
            close(listener)
            throw TestFailure("the OTLP receiver could not listen")
        }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    var spans: [ReceivedSpan] { received.withLock { $0 } }

    /// Stops accepting (the serving thread ends with the next accept).
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve() {
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            var pending: [UInt8] = []
            while let (body, rest) = Self.readRequest(connection, pending: pending) {
                pending = rest
                received.withLock { $0 += Self.spans(inJSON: body) }
                let answer = Array("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}".utf8)
                _ = write(connection, answer, answer.count)
            }
            close(connection)
        }
    }

    /// Reads one request (headers, then `content-length` bytes); nil when the peer closed.
    private static func readRequest(_ connection: Int32, pending: [UInt8]) -> (body: [UInt8], rest: [UInt8])? {
        var data = pending
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let separator = Array("\r\n\r\n".utf8)
        while true {
            if let end = data.firstRange(of: separator) {
                let head = String(decoding: data[..<end.lowerBound], as: UTF8.self).lowercased()
                let length =
                    head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                if data.count - end.upperBound >= length {
                    let body = Array(data[end.upperBound..<(end.upperBound + length)])
                    return (body, Array(data[(end.upperBound + length)...]))
                }
            }
            let count = read(connection, &buffer, buffer.count)
            guard count > 0 else { return nil }
            data += buffer[..<count]
        }
    }

    /// The spans of an OTLP `ExportTraceServiceRequest` in JSON (IDs as hex or base64).
    static func spans(inJSON body: [UInt8]) -> [ReceivedSpan] {
        guard let document = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { return [] }
        var spans: [ReceivedSpan] = []
        for resource in document["resourceSpans"] as? [[String: Any]] ?? [] {
            for scope in resource["scopeSpans"] as? [[String: Any]] ?? [] {
                for span in scope["spans"] as? [[String: Any]] ?? [] {
                    var attributes: [String: String] = [:]
                    for attribute in span["attributes"] as? [[String: Any]] ?? [] {
                        guard let key = attribute["key"] as? String, let value = attribute["value"] as? [String: Any],
                            let first = value.values.first
                        else { continue }
                        attributes[key] = "\(first)"
                    }
                    spans.append(
                        ReceivedSpan(
                            name: span["name"] as? String ?? "",
                            traceID: hex(span["traceId"] as? String ?? "", bytes: 16),
                            spanID: hex(span["spanId"] as? String ?? "", bytes: 8),
                            parentSpanID: hex(span["parentSpanId"] as? String ?? "", bytes: 8),
                            attributes: attributes
                        )
                    )
                }
            }
        }
        return spans
    }

    /// An ID as lowercase hex, whether the JSON gave it as hex (OTLP's rule) or base64.
    private static func hex(_ text: String, bytes: Int) -> String {
        if text.count == bytes * 2, text.allSatisfy(\.isHexDigit) { return text.lowercased() }
        guard let data = Data(base64Encoded: text) else { return text }
        return data.map { String(format: "%02x", $0) }.joined()
    }
}
