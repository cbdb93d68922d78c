import Metrics
import NIOCore

/// Runs the jobs of the tasks that prefer it on one NIO event loop: the pipeline's, so that a
/// poll batch's stages and the PostgreSQL connections they query share a thread. A query
/// written from that loop needs no wake-up of another thread, and its answer resumes the task
/// on the loop it arrived on, without handing it to Swift's cooperative pool.
final class EventLoopTaskExecutor: TaskExecutor {
    let eventLoop: any EventLoop
    /// Counts the jobs run (`herald_pipeline_jobs_total`): a task runs one job from each
    /// resumption to its next suspension, so jobs per poll batch measure the pipeline's
    /// fixed cost in hand-overs.
    private let jobs: Counter?

    init(_ eventLoop: any EventLoop, countingJobsIn jobs: Counter? = nil) {
        self.eventLoop = eventLoop
        self.jobs = jobs
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute {
            self.jobs?.increment()
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
