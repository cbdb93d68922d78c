import MockServerSupport
import NIOCore
import NIOPosix
import Testing

/// The listening sockets every mock push service runs on.
@Suite struct MockListenerTests {
    enum ListenerError: Error, Equatable {
        case alreadyStarted, stopped
    }

    private static func freePort() async throws -> Int {
        let probe = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
        defer { probe.close(promise: nil) }
        return try #require(probe.localAddress?.port)
    }

    @Test func aTakenPortFailsTheWaitersAndClosesThePortsBoundBeforeIt() async throws {
        let taken = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
        defer { taken.close(promise: nil) }
        let first = try await Self.freePort()
        let listener = MockListener(alreadyStarted: ListenerError.alreadyStarted, stopped: ListenerError.stopped)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // Waits before the bind, and learns of its failure.
                await #expect(throws: (any Error).self) { try await listener.listeningPorts() }
            }
            await #expect(throws: (any Error).self) {
                _ = try await listener.bind(
                    host: "127.0.0.1",
                    ports: [first, try #require(taken.localAddress?.port)],
                    authorityName: "Listener Test CA", caCertificatePath: nil,
                    configureConnection: { _, _ in }
                )
            }
            try await group.waitForAll()
        }
        #expect(listener.boundPorts == nil)
        // The first port, bound before the second failed, is free again.
        let again = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: first).get()
        try await again.close()
    }

    @Test func aStopClosesEveryAcceptedConnectionAndLaterWaitersLearnOfIt() async throws {
        let listener = MockListener(alreadyStarted: ListenerError.alreadyStarted, stopped: ListenerError.stopped)
        let channels = try await listener.bind(
            host: "127.0.0.1", ports: [0], authorityName: "Listener Test CA", caCertificatePath: nil, configureConnection: { _, _ in })
        let port = try #require(listener.boundPorts?.first)
        #expect(try await listener.listeningPorts() == [port])
        await #expect(throws: ListenerError.alreadyStarted) {
            _ = try await listener.bind(
                host: "127.0.0.1", ports: [0], authorityName: "Listener Test CA", caCertificatePath: nil, configureConnection: { _, _ in })
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await listener.serveUntilStopped(channels) }
            let client = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get()
            for _ in 0..<1_000 where listener.acceptedConnectionCount == 0 { try await Task.sleep(for: .milliseconds(2)) }
            #expect(listener.acceptedConnectionCount == 1)
            group.cancelAll()
            try await group.waitForAll()
            // Closed by the listener: the test never closes it.
            try await client.closeFuture.get()
        }
        await #expect(throws: ListenerError.stopped) { try await listener.listeningPorts() }
    }
}
