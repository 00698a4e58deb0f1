import AsyncHTTPClient
import CloudKitModel
import NIOCore
import NIOHTTP1
import Synchronization

/// Gathers an answer's body on the event loop it arrives on, each part copied at once into one
/// buffer made room for from `Content-Length`, up to `limit` bytes.
///
/// Why not `HTTPClientResponse.body`, read from a task: over HTTP/2, swift-nio-http2 hands out
/// each DATA frame as a slice of its receive buffer, and a part waiting for a task to read it
/// keeps that whole buffer alive, so the decoder copies its buffer afresh for the next bytes.
/// Measured with 16 pages in flight over one TLS connection 100 ms away (docs/performance.md):
/// 200-235 MB peak RSS and 11,300 records/s read from a task, against 95 MB and 18,000 records/s
/// over HTTP/1.1; copying on the event loop lets each slice go at once.
final class ResponseCollector: HTTPClientResponseDelegate, Sendable {
    typealias Response = JSONBytes

    struct Head: Sendable {
        var status: Int
        var headers: HTTPHeaders
    }

    /// The body would pass `limit`: `announced` when the head said so, else nil (the body did).
    struct TooLarge: Error {
        var announced: Int?
    }

    private struct State {
        var head: Head?
        /// Gathered into the buffer the answer is read from, so that a page is copied once.
        var bytes = JSONBytes.Gatherer()
    }

    let limit: Int
    private let state = Mutex(State())

    init(limit: Int) {
        self.limit = limit
    }

    /// The head, once it arrived (also after the body failed).
    var head: Head? { state.withLock { $0.head } }

    func didReceiveHead(task: HTTPClient.Task<JSONBytes>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        let announced = head.headers.first(name: "Content-Length").flatMap(Int.init)
        state.withLock { state in
            state.head = Head(status: Int(head.status.code), headers: head.headers)
            if let announced, announced > 0, announced <= limit { state.bytes.reserveCapacity(announced) }
        }
        if let announced, announced > limit { return task.eventLoop.makeFailedFuture(TooLarge(announced: announced)) }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<JSONBytes>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let fits = state.withLock { state in
            guard state.bytes.count + buffer.readableBytes <= limit else { return false }
            buffer.withUnsafeReadableBytes { state.bytes.append($0) }
            return true
        }
        return fits ? task.eventLoop.makeSucceededVoidFuture() : task.eventLoop.makeFailedFuture(TooLarge(announced: nil))
    }

    func didFinishRequest(task: HTTPClient.Task<JSONBytes>) throws -> JSONBytes {
        state.withLock { $0.bytes.finish() }
    }
}
