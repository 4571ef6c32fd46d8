-- ArgoCD health check for shardcdc.io/CdcConnector (Lua 5.1, as ArgoCD's gopher-lua runs it).
--
-- Healthy      Ready=True and the operator has observed the current spec
--              (status.observedGeneration == metadata.generation, and the same on the Ready condition).
-- Degraded     Degraded=True, or Ready=False for a reason that needs a human (failed tasks, invalid
--              spec, unreachable source, shards that would be lost).
-- Suspended    spec.state paused/stopped and every worker has exited (Paused=True, Progressing=False).
-- Progressing  everything else: not observed yet, a generation change (scale, reshard), tasks
--              starting or snapshotting, and while the connector is being deleted.
--
-- Install: argocd-cm key resource.customizations.health.shardcdc.io_CdcConnector (deploy/argocd/argocd-cm.yaml).
local hs = {}

local failureReasons = {
  InvalidSpec = true,
  TasksFailed = true,
  SourceUnreachable = true,
  NoShards = true,
  ShardsLost = true,
}

local function condition(status, kind)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function describe(c, fallback)
  if c == nil then
    return fallback
  end
  local text = c.reason or fallback
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

local meta = obj.metadata or {}

if meta.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Deleting: removing the workers"
  if meta.finalizers ~= nil and #meta.finalizers > 0 then
    hs.message = hs.message .. " (finalizers: " .. table.concat(meta.finalizers, ", ") .. ")"
  end
  return hs
end

local status = obj.status
if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe the connector"
  return hs
end

local generation = meta.generation
if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation ..
    " (observed " .. status.observedGeneration .. ")"
  return hs
end

local degraded = condition(status, "Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded, "Degraded")
  return hs
end

local ready = condition(status, "Ready")
if ready ~= nil and ready.status == "False" and ready.reason ~= nil and failureReasons[ready.reason] then
  hs.status = "Degraded"
  hs.message = describe(ready, "NotReady")
  return hs
end

local staleReady = ready ~= nil and generation ~= nil and ready.observedGeneration ~= nil and
  ready.observedGeneration < generation
if staleReady then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report Ready for generation " .. generation
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready, "Ready")
  return hs
end

local paused = condition(status, "Paused")
local progressing = condition(status, "Progressing")
if paused ~= nil and paused.status == "True" and (progressing == nil or progressing.status ~= "True") then
  hs.status = "Suspended"
  hs.message = describe(paused, "Paused")
  return hs
end

hs.status = "Progressing"
if progressing ~= nil and progressing.status == "True" then
  hs.message = describe(progressing, "Progressing")
else
  hs.message = describe(ready, "Waiting for the Ready condition")
end
return hs
