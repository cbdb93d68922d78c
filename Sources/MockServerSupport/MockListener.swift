package import NIOCore
import NIOPosix
package import NIOSSL
import ServiceLifecycle
import Synchronization

/// The listening sockets of a mock push service and the connections they accepted.
///
/// A mock binds once (``bind(host:ports:authorityName:caCertificatePath:adjustTLS:configureConnection:)``), serves until its task
/// is cancelled or gracefully shut down (``serveUntilStopped(_:)``), then closes every accepted
/// connection. ``listeningPorts()`` waits for the bound ports from any task.
package final class MockListener: Sendable {
    private enum Lifecycle {
        case notListening(hasStarted: Bool, waiters: [UInt64: CheckedContinuation<[Int], any Error>])
        case listening(ports: [Int])
        case failed(any Error)
        case stopped
    }

    private struct Connections {
        var channels: [ObjectIdentifier: any Channel] = [:]
        var isClosed = false
        var acceptedCount = 0
    }

    private let lifecycle = Mutex(Lifecycle.notListening(hasStarted: false, waiters: [:]))
    private let connections = Mutex(Connections())
    private let nextWaiterID = Atomic<UInt64>(0)
    private let alreadyStarted: any Error
    private let stopped: any Error

    /// A listener whose second ``bind(host:ports:authorityName:caCertificatePath:adjustTLS:configureConnection:)`` throws
    /// `alreadyStarted`, and whose port waiters get `stopped` once it stopped.
    package init(alreadyStarted: any Error, stopped: any Error) {
        self.alreadyStarted = alreadyStarted
        self.stopped = stopped
    }

    /// Makes a throw-away CA named `authorityName` (its PEM written to `caCertificatePath`, when
    /// given, for clients to trust) and a server certificate for `host`, lets `adjustTLS` change
    /// the TLS configuration (throwing from it fails the start), binds `ports` on `host` (0 picks
    /// a free one; the ones bound are closed again when a later one fails) and tells the port
    /// waiters. Each accepted connection is tracked, then handed to `configureConnection` on its
    /// event loop.
    package func bind(
        host: String,
        ports: [Int],
        authorityName: String,
        caCertificatePath: String?,
        adjustTLS: (inout TLSConfiguration) throws -> Void = { _ in },
        configureConnection: @escaping @Sendable (any Channel, NIOSSLContext) throws -> Void
    ) async throws -> [any Channel] {
        try lifecycle.withLock { state in
            guard case .notListening(hasStarted: false, let waiters) = state else { throw alreadyStarted }
            state = .notListening(hasStarted: true, waiters: waiters)
        }
        var channels: [any Channel] = []
        do {
            let identity = try SelfSignedTLSIdentity(authorityName: authorityName, host: host)
            if let caCertificatePath { try identity.writeCertificateAuthority(to: caCertificatePath) }
            var tls = identity.serverConfiguration
            try adjustTLS(&tls)
            let sslContext = try NIOSSLContext(configuration: tls)
            for port in ports {
                let bound = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                    .serverChannelOption(.backlog, value: 256)
                    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                    // TCP_NODELAY is ServerBootstrap's default for accepted connections (not
                    // `.socketOption(.tcp_nodelay)`: that is SO_DEBUG, refused without CAP_NET_ADMIN).
                    .childChannelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture {
                            guard self.track(channel) else { return channel.close(promise: nil) }
                            try configureConnection(channel, sslContext)
                        }
                    }
                    .bind(host: host, port: port)
                    .get()
                channels.append(bound)
            }
        } catch {
            for channel in channels { try? await channel.close().get() }
            finish(.failed(error))
            throw error
        }
        finish(.listening(ports: zip(channels, ports).map { channel, port in channel.localAddress?.port ?? port }))
        return channels
    }

    /// Waits until the task is cancelled or gracefully shut down, then closes `channels` and
    /// every accepted connection, and fails later port waiters.
    package func serveUntilStopped(_ channels: [any Channel]) async {
        await withTaskCancellationOrGracefulShutdownHandler {
            for channel in channels { try? await channel.closeFuture.get() }
        } onCancelOrGracefulShutdown: {
            for channel in channels { channel.close(promise: nil) }
        }
        let open = connections.withLock { connections in
            connections.isClosed = true
            return Array(connections.channels.values)
        }
        for connection in open { connection.close(promise: nil) }
        for connection in open { try? await connection.closeFuture.get() }
        finish(.stopped)
    }

    /// The bound ports, in the order given to ``bind(host:ports:authorityName:caCertificatePath:adjustTLS:configureConnection:)``;
    /// waits until they are bound. Throws when binding failed or the listener stopped.
    package func listeningPorts() async throws -> [Int] {
        let waiterID = nextWaiterID.add(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[Int], any Error>) in
                let result = lifecycle.withLock { state -> Result<[Int], any Error>? in
                    switch state {
                    case .listening(let ports): return .success(ports)
                    case .failed(let error): return .failure(error)
                    case .stopped: return .failure(stopped)
                    case .notListening(let hasStarted, var waiters):
                        if Task.isCancelled { return .failure(CancellationError()) }
                        waiters[waiterID] = continuation
                        state = .notListening(hasStarted: hasStarted, waiters: waiters)
                        return nil
                    }
                }
                if let result { continuation.resume(with: result) }
            }
        } onCancel: {
            let continuation = lifecycle.withLock { state -> CheckedContinuation<[Int], any Error>? in
                guard case .notListening(let hasStarted, var waiters) = state else { return nil }
                defer { state = .notListening(hasStarted: hasStarted, waiters: waiters) }
                return waiters.removeValue(forKey: waiterID)
            }
            continuation?.resume(throwing: CancellationError())
        }
    }

    /// The bound ports now, without waiting; nil unless listening.
    package var boundPorts: [Int]? {
        lifecycle.withLock { state in
            guard case .listening(let ports) = state else { return nil }
            return ports
        }
    }

    /// TCP connections accepted since the listener started (a probe's included).
    package var acceptedConnectionCount: Int {
        connections.withLock { $0.acceptedCount }
    }

    /// Tracks an accepted connection until it closes; false once the listener is stopping.
    private func track(_ channel: any Channel) -> Bool {
        let tracked = connections.withLock { connections in
            guard !connections.isClosed else { return false }
            connections.channels[ObjectIdentifier(channel)] = channel
            connections.acceptedCount += 1
            return true
        }
        if tracked {
            channel.closeFuture.whenComplete { _ in
                _ = self.connections.withLock { $0.channels.removeValue(forKey: ObjectIdentifier(channel)) }
            }
        }
        return tracked
    }

    private func finish(_ newState: Lifecycle) {
        let waiters = lifecycle.withLock { state -> [CheckedContinuation<[Int], any Error>] in
            defer { state = newState }
            guard case .notListening(_, let waiters) = state else { return [] }
            return Array(waiters.values)
        }
        let result: Result<[Int], any Error> =
            switch newState {
            case .listening(let ports): .success(ports)
            case .failed(let error): .failure(error)
            case .stopped, .notListening: .failure(stopped)
            }
        for waiter in waiters { waiter.resume(with: result) }
    }
}
