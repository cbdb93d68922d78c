@testable import HeraldService
import NIOCore
import NIOPosix
import Testing

/// The pipeline's executor: a task that prefers it runs on its event loop, before and after
/// every suspension, whichever thread resumes it.
struct EventLoopTaskExecutorTests {
    @Test func aTaskPreferringTheExecutorRunsOnItsLoopAcrossSuspensions() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loop = group.next()
        let other = group.next()
        #expect(loop !== other)
        let places = try await withTaskExecutorPreference(EventLoopTaskExecutor(loop)) {
            var places = [loop.inEventLoop]
            // Resumed from the other loop's thread, as a query's answer or an APNs response is.
            try await other.submit {}.get()
            places.append(loop.inEventLoop)
            try await Task.sleep(for: .milliseconds(1))
            places.append(loop.inEventLoop)
            async let child = loop.inEventLoop
            places.append(await child)
            return places
        }
        #expect(places == [true, true, true, true])
        #expect(!loop.inEventLoop)
        try await group.shutdownGracefully()
    }
}
