import NIOCore
import NIOPosix
import Synchronization

/// A TCP proxy on loopback in front of one server, whose connections can be frozen: a frozen
/// connection stays open on both sides and silently drops every byte, as a connection does
/// whose NAT mapping expired or whose server failed over while it sat idle. Connections opened
/// after the freeze pass bytes again.
final class FreezableTCPProxy: Sendable {
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private let opened = OpenedConnections()
    private let listener: any Channel

    /// The proxy's port on 127.0.0.1.
    var port: Int { listener.localAddress!.port! }

    init(toHost host: String, port targetPort: Int) async throws {
        let opened = self.opened
        let group = self.group
        listener = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                let connection = ProxiedConnection(inbound: inbound)
                opened.list.withLock { $0.append(connection) }
                return inbound.pipeline.addHandler(Relay(connection: connection, towardsServer: true)).flatMap {
                    ClientBootstrap(group: inbound.eventLoop)
                        .channelInitializer { outbound in
                            outbound.pipeline.addHandler(Relay(connection: connection, towardsServer: false))
                        }
                        .connect(host: host, port: targetPort)
                        .map { outbound in connection.connected(outbound) }
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
    }

    /// Freezes every connection open now.
    func freeze() {
        for connection in opened.list.withLock({ $0 }) { connection.frozen.store(true, ordering: .relaxed) }
    }

    /// Closes every frozen connection (the end of a test that found them still in use).
    func closeFrozen() {
        for connection in opened.list.withLock({ $0 }) where connection.frozen.load(ordering: .relaxed) {
            connection.close()
        }
    }

    func shutdown() async throws {
        for connection in opened.list.withLock({ $0 }) { connection.close() }
        try await listener.close()
        try await group.shutdownGracefully()
    }
}

/// The connections the proxy accepted.
final class OpenedConnections: Sendable {
    let list = Mutex<[ProxiedConnection]>([])
}

/// One client connection and its connection to the server.
final class ProxiedConnection: Sendable {
    let inbound: any Channel
    let outbound = Mutex<(any Channel)?>(nil)
    let frozen = Atomic(false)

    init(inbound: any Channel) { self.inbound = inbound }

    func connected(_ channel: any Channel) { outbound.withLock { $0 = channel } }

    func peer(ofServerSide towardsServer: Bool) -> (any Channel)? {
        towardsServer ? outbound.withLock { $0 } : inbound
    }

    func close() {
        inbound.close(promise: nil)
        outbound.withLock { $0 }?.close(promise: nil)
    }
}

/// Forwards what one side reads to the other, unless the connection is frozen.
private final class Relay: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let connection: ProxiedConnection
    /// True on the client's side: bytes read go to the server.
    let towardsServer: Bool

    init(connection: ProxiedConnection, towardsServer: Bool) {
        self.connection = connection
        self.towardsServer = towardsServer
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !connection.frozen.load(ordering: .relaxed), let peer = connection.peer(ofServerSide: towardsServer) else { return }
        peer.writeAndFlush(unwrapInboundIn(data), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        guard !connection.frozen.load(ordering: .relaxed) else { return }
        connection.close()
    }
}
