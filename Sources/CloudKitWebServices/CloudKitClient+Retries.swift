import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Retries: what may succeed later is sent again, within the attempts and the time budget,
/// each attempt with its own slot from the limiter; a refused web auth token gives way to the
/// one before it.
extension CloudKitClient {
    /// Sends one request until it succeeds, fails for good, or runs out of attempts or budget.
    /// Each attempt takes its own slot from the limiter, so that a request waiting to retry does
    /// not hold back the others.
    func sendWithRetries<Response>(
        operation: String, method: HTTPMethod, path: String, body: [UInt8]?, logger: Logger, decode: (JSONBytes) throws -> Response
    ) async throws -> Response {
        let policy = configuration.retry
        let start = ContinuousClock.now
        var attempt = 0
        var tokenRetries = 0
        var retriedWithANewerToken = false
        var misdirections = 0
        var askedAgainForOddEntries = false
        while true {
            attempt += 1
            try Task.checkCancellation()
            let ticket = try await limiter.acquire()
            let token: String?
            do {
                token = try await tokens.tokenForRequest(logger: logger)
            } catch {
                _ = await limiter.release(ticket, .failed)
                throw error
            }
            var error: CloudKitError
            let retryAfter: Duration?
            do {
                let answer = try await attemptOnce(operation: operation, method: method, path: path, body: body, token: token, logger: logger)
                Metrics.requests(status: "200").increment()
                // The slot goes back before the answer is decoded: the server counts a request
                // in flight until it has answered, and the limiter learns the server's cap from
                // its own count, which decoding on a loaded machine would inflate.
                let oneAtATime = await limiter.release(ticket, .succeeded)
                // Only a refused token that a newer one then got past says that the server
                // wants one request at a time; a revoked session says nothing of the kind, nor
                // an older token taken after a refusal (a proxy's bare 401, say): learned from
                // that, every later run went one request at a time for good.
                if oneAtATime, retriedWithANewerToken { tokens.learnOneAtATime() }
                do {
                    let response = answer.scrubbed(try decode(answer.body))
                    // Entries of no shape CloudKit sends: asked for once more, as a passing
                    // fault's (a proxy's garbled answer) would be gone; then taken with them as
                    // rejects, rather than failing the zone at that page run after run. Not when
                    // one has no name to trust: its row could not be kept from a sweep or a
                    // resync, which would take the record for deleted; such an answer is refused
                    // as one that is not JSON is.
                    guard let odd = response as? any EntriesOfNoKnownShape, odd.entriesOfNoKnownShape > 0 else { return response }
                    error = answer.malformed(EntriesOfNoShape(count: odd.entriesOfNoKnownShape, nameless: odd.namelessEntriesOfNoKnownShape))
                    error.attempts = attempt
                    let again = askedAgainForOddEntries ? nil : retryDelay(for: error, attempt: attempt, since: start, policy: policy)
                    askedAgainForOddEntries = true
                    if again == nil, odd.namelessEntriesOfNoKnownShape == 0 {
                        logger.warning(
                            "taking entries of no shape CloudKit sends as rejects, given by \(attempt) attempts",
                            metadata: ["entries": "\(odd.entriesOfNoKnownShape)", "operation": "\(operation)"])
                        return response
                    }
                    retryAfter = again
                } catch let decoding {
                    error = answer.malformed(decoding)
                    error.attempts = attempt
                    retryAfter = retryDelay(for: error, attempt: attempt, since: start, policy: policy)
                }
            } catch let failure as CloudKitError {
                Metrics.requests(status: failure.httpStatus.map(String.init) ?? "none").increment()
                error = failure
                error.attempts = attempt
                retryAfter = retryDelay(for: error, attempt: attempt, since: start, policy: policy)
                let throttled = error.code == .throttled || error.code == .tryAgainLater
                // A wait this request will not make (it gives up) holds no other request back.
                let pause = retryAfter == nil ? nil : error.retryAfter
                _ = await limiter.release(ticket, throttled ? .throttled(pause: pause) : .failed)
            } catch {
                _ = await limiter.release(ticket, .failed)
                throw error
            }
            // A connection Apple's edge holds for another host: dropped, and the request sent
            // once more on a fresh one, at once. A second 421 on a fresh connection is final.
            if error.code == .misdirected, misdirections == 0 {
                misdirections += 1
                attempt -= 1
                Metrics.misdirectedRetries.increment()
                logger.warning("CloudKit answered 421 Misdirected Request; retrying once on a fresh connection")
                continue
            }
            // A refused web auth token: 401, or 421 AUTHENTICATION_REQUIRED, which CloudKit may
            // send for a token it no longer accepts as well as for a session that has ended
            // (Apple documents neither): the newest token known is tried before a person is
            // asked to sign in again.
            if error.code == .authenticationFailed || error.code == .authenticationRequired, let token,
                tokenRetries < WebAuthTokenStore.tokensKept,
                case (let another, let newer) = await mayRetryWithAnotherToken(after: token, logger: logger), another
            {
                // The token that succeeds, if any, is the one tried last.
                retriedWithANewerToken = newer
                tokenRetries += 1
                attempt -= 1
                continue
            }
            guard let retryAfter else {
                if error.isRetryable, attempt < max(policy.maxAttempts, 1) {
                    logger.warning(
                        "giving up: the next attempt would exceed the retry budget",
                        metadata: ["attempt": "\(attempt)", "code": "\(error.code)", "budget": "\(policy.budget.seconds)s"])
                    error.budgetExceeded = true
                }
                throw error
            }
            var metadata: Logger.Metadata = [
                "attempt": "\(attempt)", "maxAttempts": "\(policy.maxAttempts)",
                "delay": "\(String(format: "%.3f", retryAfter.seconds))s", "code": "\(error.code)",
            ]
            if let status = error.httpStatus { metadata["status"] = "\(status)" }
            if let asked = error.retryAfter { metadata["retryAfter"] = "\(asked)s" }
            logger.warning("CloudKit request failed; retrying", metadata: metadata)
            Metrics.retries.increment()
            try await Task.sleep(for: retryAfter)
        }
    }

    /// Why an answer that decoded is asked for again.
    struct EntriesOfNoShape: Error, CustomStringConvertible {
        var count: Int
        var nameless: Int
        var description: String {
            "\(count) entr\(count == 1 ? "y" : "ies") of no shape CloudKit sends"
                + (nameless == 0 ? "" : ", \(nameless) without a name to keep its row by")
        }
    }

    /// How long to wait before trying a failed request again; nil when it is not to be tried
    /// again: the failure is final, the attempts are spent, or the wait would not end within
    /// the retry budget (a server asking for an hour is not waited for when the budget is five
    /// minutes: the request fails at once).
    func retryDelay(for error: CloudKitError, attempt: Int, since start: ContinuousClock.Instant, policy: RetryPolicy) -> Duration? {
        guard error.isRetryable, attempt < max(policy.maxAttempts, 1) else { return nil }
        let delay = policy.delay(afterAttempt: attempt, retryAfter: error.retryAfter)
        guard ContinuousClock.now - start + delay <= policy.budget else { return nil }
        return delay
    }

    /// A request was refused with `AUTHENTICATION_FAILED` (or `AUTHENTICATION_REQUIRED`). With
    /// requests in flight together, its token may have been overtaken by the others' (a server
    /// that accepts only the newest token or two): requests go one at a time from now on, and
    /// once those in flight have answered, the request is tried again with the newest token
    /// known. Returns false when no token is left to try: a person must sign in again.
    func mayRetryWithAnotherToken(after refused: String, logger: Logger) async -> (another: Bool, newer: Bool) {
        if await limiter.becomeOneAtATime() {
            let kept =
                configuration.webAuthTokenFile == nil && configuration.webAuthTokenVault == nil
                ? "" : " (the token file keeps this for later runs once a newer token succeeds)"
            logger.warning(
                "CloudKit refused a web auth token; it may accept only the newest, so requests go one at a time from now on\(kept)")
        }
        await limiter.drain()
        let (another, newer) = await tokens.refusedTakingNext(refused, logger: logger)
        if another { logger.info("retrying the request with the newest web auth token") }
        return (another, newer)
    }
}
