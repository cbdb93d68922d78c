import NIOCore

/// Runs the jobs of the tasks that prefer it on one NIO event loop: the pipeline's, so that a
/// poll batch's stages and the PostgreSQL connections they query share a thread. A query
/// written from that loop needs no wake-up of another thread, and its answer resumes the task
/// on the loop it arrived on, without handing it to Swift's cooperative pool.
final class EventLoopTaskExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
