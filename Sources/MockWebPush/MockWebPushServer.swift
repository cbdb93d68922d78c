public import Logging
import MockServerSupport
import NIOCore
import NIOHTTP2
import NIOSSL
public import ServiceLifecycle
import Synchronization

/// A mock Web Push service (RFC 8030) with several origins, HTTP/2 over TLS, that plays the
/// browser too: it makes the subscriptions, so it holds their private keys and decrypts each
/// message (RFC 8291), which a real push service cannot, so tests see what the service worker
/// would.
///
/// `POST /push/<id>` checks the subscription, VAPID (RFC 8292), the headers and the size, decrypts
/// and answers 201, each refusal beside the page that shows a push service answering so
/// (MockWebPushReply.swift); scripted answers inject 429, 5xx, 404 and 410. `POST /subscribe`
/// makes a subscription over HTTP; `GET /stats` gives the counters. `run()` generates a throw-away
/// CA and server certificate, binds every origin, and serves until cancelled or gracefully shut
/// down. The counters can be read at any time from any thread.
public final class MockWebPushServer: Service, Sendable {
    /// SETTINGS_MAX_CONCURRENT_STREAMS, as many as a sender's pool may want to open.
    static let maxConcurrentStreams = 1000

    let configuration: MockWebPushConfiguration
    let logger: Logger
    let ledger: Mutex<Ledger>
    private let listener = MockListener(alreadyStarted: MockWebPushServerError.alreadyStarted, stopped: MockWebPushServerError.stopped)

    /// Creates a server; nothing happens until ``run()``.
    public init(configuration: MockWebPushConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        self.ledger = Mutex(
            Ledger(
                generator: SeededRandomNumberGenerator(seed: configuration.seed ?? UInt64.random(in: .min ... .max)),
                logLimit: max(0, configuration.requestLogLimit)
            )
        )
    }

    // MARK: Running

    /// Binds every origin, serves until cancelled or gracefully shut down, then closes every
    /// connection.
    public func run() async throws {
        let channels: [any Channel]
        do {
            channels = try await listener.bind(
                host: configuration.host,
                ports: configuration.ports,
                authorityName: "Herald Mock Web Push CA",
                caCertificatePath: configuration.caCertificatePath,
                adjustTLS: { _ in
                    guard !configuration.ports.isEmpty else { throw MockWebPushServerError.noPorts }
                },
                configureConnection: { channel, sslContext in try self.configureConnection(channel, sslContext: sslContext) }
            )
        } catch {
            logger.error("mock web push failed to start", metadata: ["error": "\(error)"])
            throw error
        }
        let origins = (listener.boundPorts ?? []).map { Self.origin(host: configuration.host, port: $0) }
        logger.info("mock web push listening", metadata: ["mock_webpush.origins": "\(origins.joined(separator: " "))"])
        await listener.serveUntilStopped(channels)
        logger.info("mock web push stopped", metadata: ["mock_webpush.delivered": "\(stats.deliveries)"])
    }

    /// The bound ports, one per origin in ``MockWebPushConfiguration/ports`` order; waits until
    /// ``run()`` has bound them. Throws when `run()` failed or stopped.
    public func listeningPorts() async throws -> [Int] {
        try await listener.listeningPorts()
    }

    /// The origins, `https://<host>:<port>`, in ``MockWebPushConfiguration/ports`` order; waits
    /// as ``listeningPorts()`` does.
    public func origins() async throws -> [String] {
        try await listeningPorts().map { Self.origin(host: configuration.host, port: $0) }
    }

    /// The bound ports now, without waiting.
    func boundPorts() throws -> [Int] {
        guard let ports = listener.boundPorts else { throw MockWebPushServerError.notListening }
        return ports
    }

    /// `https://<host>:<port>`, an IPv6 address in brackets (RFC 3986 §3.2.2).
    static func origin(host: String, port: Int) -> String {
        "https://\(host.contains(":") ? "[\(host)]" : host):\(port)"
    }

    /// TLS, HTTP/2 and the request handler on an accepted connection (on its event loop); the
    /// origin is the port the connection arrived on.
    private func configureConnection(_ channel: any Channel, sslContext: NIOSSLContext) throws {
        let origin = Self.origin(host: configuration.host, port: channel.localAddress?.port ?? 0)
        ledger.withLock { $0.connectionsByOrigin[origin, default: 0] += 1 }

        var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
        connectionConfiguration.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: Self.maxConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16 * 1024),
            HTTP2Setting(parameter: .initialWindowSize, value: MockWebPushConnectionHandler.streamWindowSize),
        ]
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(NIOSSLServerHandler(context: sslContext))
        try pipeline.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: connectionConfiguration))
        try pipeline.addHandler(MockWebPushConnectionHandler(server: self, origin: origin))
    }
}
