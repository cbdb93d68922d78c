import Crypto
import Foundation
public import Logging
import MockAPNS
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
public import ServiceLifecycle
import SwiftASN1
import Synchronization
import X509

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
    private let lifecycle = Mutex(Lifecycle.idle(waiters: []))
    private let openConnections = Mutex<[ObjectIdentifier: any Channel]?>([:])

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
        try lifecycle.withLock { state in
            guard case .idle(let waiters) = state else { throw MockWebPushServerError.alreadyStarted }
            state = .starting(waiters: waiters)
        }
        let serverChannels: [any Channel]
        do {
            guard !configuration.ports.isEmpty else { throw MockWebPushServerError.noPorts }
            serverChannels = try await bindAll()
        } catch {
            logger.error("mock web push failed to start", metadata: ["error": "\(error)"])
            finish(.failed(error))
            throw error
        }
        let ports = serverChannels.map { $0.localAddress?.port ?? 0 }
        finish(.listening(ports: ports))
        let origins = ports.map { Self.origin(host: configuration.host, port: $0) }
        logger.info("mock web push listening", metadata: ["mock_webpush.origins": "\(origins.joined(separator: " "))"])

        await withTaskCancellationOrGracefulShutdownHandler {
            for channel in serverChannels { try? await channel.closeFuture.get() }
        } onCancelOrGracefulShutdown: {
            for channel in serverChannels { channel.close(promise: nil) }
        }
        let connections = openConnections.withLock { open in
            defer { open = nil }
            return Array((open ?? [:]).values)
        }
        for connection in connections { connection.close(promise: nil) }
        for connection in connections { try? await connection.closeFuture.get() }
        finish(.stopped)
        logger.info("mock web push stopped", metadata: ["mock_webpush.delivered": "\(stats.deliveries)"])
    }

    /// The bound ports, one per origin in ``MockWebPushConfiguration/ports`` order; waits until
    /// ``run()`` has bound them. Throws when `run()` failed or stopped.
    public func listeningPorts() async throws -> [Int] {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[Int], any Error>) in
            let result = lifecycle.withLock { state -> Result<[Int], any Error>? in
                switch state {
                case .idle(let waiters):
                    state = .idle(waiters: waiters + [continuation])
                    return nil
                case .starting(let waiters):
                    state = .starting(waiters: waiters + [continuation])
                    return nil
                case .listening(let ports): return .success(ports)
                case .failed(let error): return .failure(error)
                case .stopped: return .failure(MockWebPushServerError.stopped)
                }
            }
            if let result { continuation.resume(with: result) }
        }
    }

    /// The origins, `https://<host>:<port>`, in ``MockWebPushConfiguration/ports`` order; waits
    /// as ``listeningPorts()`` does.
    public func origins() async throws -> [String] {
        try await listeningPorts().map { Self.origin(host: configuration.host, port: $0) }
    }

    /// The bound ports now, without waiting.
    func boundPorts() throws -> [Int] {
        try lifecycle.withLock { state in
            guard case .listening(let ports) = state else { throw MockWebPushServerError.notListening }
            return ports
        }
    }

    /// `https://<host>:<port>`, an IPv6 address in brackets (RFC 3986 §3.2.2).
    static func origin(host: String, port: Int) -> String {
        "https://\(host.contains(":") ? "[\(host)]" : host):\(port)"
    }

    private func finish(_ newState: Lifecycle) {
        let waiters = lifecycle.withLock { state -> [CheckedContinuation<[Int], any Error>] in
            defer { state = newState }
            switch state {
            case .idle(let waiters), .starting(let waiters): return waiters
            default: return []
            }
        }
        let result: Result<[Int], any Error> =
            switch newState {
            case .listening(let ports): .success(ports)
            case .failed(let error): .failure(error)
            default: .failure(MockWebPushServerError.stopped)
            }
        for waiter in waiters { waiter.resume(with: result) }
    }

    /// One CA and server certificate for every origin, then a listening socket per port; the
    /// ones bound are closed again when a later one fails.
    private func bindAll() async throws -> [any Channel] {
        let authority = try CertificateAuthority(commonName: "Herald Mock Web Push CA")
        let server = try authority.issue(commonName: "localhost", usage: .serverAuth, alternativeNames: Self.alternativeNames(configuration.host))
        if let path = configuration.caCertificatePath {
            let url = URL(fileURLWithPath: path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(try authority.pem.utf8).write(to: url, options: .atomic)
        }
        var serializer = DER.Serializer()
        try serializer.serialize(server.certificate)
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: serializer.serializedBytes, format: .der))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(server.privateKey.derRepresentation), format: .der))
        )
        tls.applicationProtocols = ["h2"]
        tls.minimumTLSVersion = .tlsv12
        let sslContext = try NIOSSLContext(configuration: tls)
        var channels: [any Channel] = []
        do {
            for port in configuration.ports {
                let bound = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                    .serverChannelOption(.backlog, value: 256)
                    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                    .childChannelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture { try self.configureConnection(channel, sslContext: sslContext) }
                    }
                    .bind(host: configuration.host, port: port)
                    .get()
                channels.append(bound)
            }
        } catch {
            for channel in channels { try? await channel.close().get() }
            throw error
        }
        return channels
    }

    /// TLS, HTTP/2 and the request handler on an accepted connection (on its event loop); the
    /// origin is the port the connection arrived on.
    private func configureConnection(_ channel: any Channel, sslContext: NIOSSLContext) throws {
        let tracked = openConnections.withLock { open -> Bool in
            guard open != nil else { return false }
            open?[ObjectIdentifier(channel)] = channel
            return true
        }
        guard tracked else {
            channel.close(promise: nil)
            return
        }
        channel.closeFuture.whenComplete { _ in
            self.openConnections.withLock { _ = $0?.removeValue(forKey: ObjectIdentifier(channel)) }
        }
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

    /// `localhost`, the loopback addresses and the configured host, so a client verifying the
    /// certificate against any of them accepts it.
    private static func alternativeNames(_ host: String) -> [GeneralName] {
        var names: [GeneralName] = [
            .dnsName("localhost"),
            .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
            .ipAddress(ASN1OctetString(contentBytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
        ]
        let octets = host.split(separator: ".").compactMap { UInt8($0) }
        if octets.count == 4, host.split(separator: ".").count == 4 {
            if octets != [127, 0, 0, 1] { names.append(.ipAddress(ASN1OctetString(contentBytes: octets[...]))) }
        } else if !host.isEmpty, host != "localhost", !host.contains(":") {
            names.append(.dnsName(host))
        }
        return names
    }

    enum Lifecycle {
        case idle(waiters: [CheckedContinuation<[Int], any Error>])
        case starting(waiters: [CheckedContinuation<[Int], any Error>])
        case listening(ports: [Int])
        case failed(any Error)
        case stopped
    }
}
